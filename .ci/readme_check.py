#!/usr/bin/env python3
"""Runs every command of the ```sh blocks of README.md, then of each docs/*.md (sorted by name), as
written, in order, in one scratch copy of the working tree, with the README's own install commands
(which come first) putting `gapscope` on PATH; a page's commands may use files its earlier commands
made. Each command is reported as `PAGE:LINE: cmd`; fails when any command does not do what its page
says (every command is run, the failures are counted).

Without a GPU, `gapscope record -- CMD` still starts CMD (no CUDA: nothing is traced); it passes
when gapscope's last stderr line is its own note or error about the program (exited with status
N, command not found), since the program itself needs torch and a GPU. `gapscope try` runs its
program under record the same way: without a GPU it passes when every BASE run failed (its error
line says so), as does `try --from` the folder it left. Everything else must exit 0.
README_CHECK_SKIP_TESTS=1 leaves out the README's test command (.ci/run runs it itself first).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commands(readme):
    """(line number, command) of every ```sh block, continuations joined, comments dropped."""
    out, in_sh, pending, start = [], False, "", 0
    for n, line in enumerate(readme.splitlines(), 1):
        fence = line.strip()
        if fence.startswith("```"):
            in_sh = (not in_sh) and fence == "```sh"
            continue
        if not in_sh:
            continue
        if not pending:
            start = n
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        cmd = re.sub(r"\s+#\s.*$", "", pending).strip()
        pending = ""
        if cmd and not cmd.startswith("#"):
            out.append((start, cmd))
    return out


def copy_tree(dest):
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.split(b"\0")
    for f in filter(None, files):
        src = os.path.join(ROOT, f.decode())
        if os.path.isfile(src):
            dst = os.path.join(dest, f.decode())
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)


def has_gpu():
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0


def pages():
    """README.md, then docs/*.md sorted: (page, [(line, command)])."""
    names = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    out = []
    for name in names:
        with open(os.path.join(ROOT, name)) as f:
            out.append((name, commands(f.read())))
    return out


def main():
    by_page = pages()
    if not by_page[0][1]:
        sys.exit("readme_check: no ```sh commands in README.md")
    cmds = [(page, line, cmd) for page, page_cmds in by_page for line, cmd in page_cmds]
    scratch = tempfile.mkdtemp(prefix="gapscope-readme-")
    tree = os.path.join(scratch, "gapscope")
    copy_tree(tree)
    venv = os.path.join(scratch, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    env = dict(os.environ)
    env["VIRTUAL_ENV"] = venv
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env["PATH"]
    # Reuse the checkout's build cache for cargo's own commands.
    env.setdefault("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    gpu = has_gpu()
    failures = 0
    began_all = time.monotonic()
    for page, line, cmd in cmds:
        if os.environ.get("README_CHECK_SKIP_TESTS") == "1" and "cargo test" in cmd:
            print(f"{page}:{line}: {cmd}\n  not run here: .ci/run ran the test command before this check")
            continue
        began = time.monotonic()
        p = subprocess.run(cmd, shell=True, cwd=tree, env=env, capture_output=True, text=True)
        took = time.monotonic() - began
        err_lines = p.stderr.strip().splitlines()
        last = err_lines[-1] if err_lines else ""
        words = shlex.split(cmd)
        is_record = len(words) > 1 and words[0] == "gapscope" and words[1] == "record"
        is_try = len(words) > 1 and words[0] == "gapscope" and words[1] == "try"
        if p.returncode == 0:
            ok, why = True, "exit 0"
        elif is_record and not gpu:
            ok = re.match(r"gapscope: (note: .* exited with status \d+|error: .*command not found)", last) is not None
            why = f"no GPU: the program ran under record and failed as expected ({last})"
        elif is_try and not gpu:
            ok = last.startswith("gapscope: error: BASE failed in every round")
            why = f"no GPU: every run of the program failed under record, as expected ({last})"
        else:
            ok, why = False, f"exit {p.returncode}"
        print(f"{page}:{line}: {cmd}\n  {'ok' if ok else 'FAILED'}: {why} ({took:.1f} s)")
        if not ok:
            failures += 1
            print("  stdout tail:\n    " + "\n    ".join(p.stdout.strip().splitlines()[-8:]))
            print("  stderr tail:\n    " + "\n    ".join(err_lines[-8:]))
    shutil.rmtree(scratch, ignore_errors=True)
    counts = ", ".join(f"{page} {len(c)}" for page, c in by_page if c)
    took_all = time.monotonic() - began_all
    print(f"readme_check: {len(cmds) - failures} of {len(cmds)} commands as documented ({counts}; {took_all:.0f} s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
