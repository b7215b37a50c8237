"""Times one run for benches/common/time_it.sh: `time_run.py LIMIT OUT CMD...`.

Appends "seconds kbytes" to OUT: the wall time from start to exit, read from a monotonic clock
to the microsecond (GNU time's wall clock has 10 ms steps, 12 % of a 0.08 s run), and the peak
resident set size as the kernel reports it for the process (wait4, as GNU time reads it). Past
LIMIT seconds the run is killed and "dnf" is appended. The command's stdout is discarded and
its stderr goes to OUT.log. Exit status: the command's, 124 past the limit.
"""
import os
import subprocess
import sys
import time


def main():
    limit, out, cmd = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
    with open(out + ".log", "ab") as log:
        began = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        deadline = began + limit
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                child.kill()
                os.wait4(child.pid, 0)
                with open(out, "a") as f:
                    f.write("dnf\n")
                return 124
            time.sleep(0.0002)
        seconds = time.perf_counter() - began
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        with open(out, "a") as f:
            f.write(f"{seconds:.4f} {usage.ru_maxrss}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
