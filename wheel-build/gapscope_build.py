"""PEP 517 build backend of gapscope's wheel: maturin's, plus the injection library.

maturin's `bindings = "bin"` puts the `gapscope` executable in the wheel (`.data/scripts/`,
installed as `<prefix>/bin/gapscope`) and nothing else. `gapscope record` also needs the crate's
cdylib, `libgapscope.so`, which the CUDA driver loads into the traced program. This backend
lets maturin build the wheel, then has cargo build the cdylib with the same profile (maturin's
build already compiled the library, so cargo only links it) and adds it to the wheel as
`.data/data/lib/gapscope/libgapscope.so`, installed as `<prefix>/lib/gapscope/libgapscope.so`:
where `gapscope record` looks, next to its own `bin/` (`WHEEL_LIB_DIR` in
src/record/launch.rs).

The manual pages (`gapscope man DIR`, run from the wheel's own executable) go in as
`.data/data/share/man/man1/`, so `man gapscope` finds them beside a `bin/` on `PATH`.

It also asks maturin for a manylinux tag (`--compatibility pypi`: the newest policy the binary's
glibc symbols allow, checked by maturin's auditwheel) where maturin's own PEP 517 default is the
plain `linux_x86_64` tag. `MATURIN_PEP517_ARGS` or `--config-settings build-args=...` that name
`--compatibility` win.
"""

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import stat
import sys
import tempfile
import zipfile

import maturin
from maturin import (  # noqa: F401  (re-exported: the rest of the PEP 517 interface)
    build_sdist,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_wheel,
)

# The cargo profile of [tool.maturin] in pyproject.toml (Cargo.toml's [profile.wheel]).
PROFILE = "wheel"
# Inside the wheel's `.data/data/`: `<prefix>/lib/gapscope/`.
LIB_DIR = "lib/gapscope"
LIB_NAME = "libgapscope.so"

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)


def _with_compatibility(config_settings):
    """config_settings asking maturin for a PyPI-compatible (manylinux) tag, unless the caller
    chose a tag already."""
    chosen = " ".join(maturin.get_maturin_pep517_args(config_settings))
    if "--compatibility" in chosen or "--manylinux" in chosen:
        return config_settings
    settings = dict(config_settings or {})
    extra = settings.get("build-args", "")
    settings["build-args"] = f"{extra} --compatibility pypi".strip()
    return settings


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = maturin.build_wheel(wheel_directory, _with_compatibility(config_settings), metadata_directory)
    wheel = os.path.join(wheel_directory, name)
    with open(injection_library(), "rb") as f:
        files = {f"data/{LIB_DIR}/{LIB_NAME}": (f.read(), True)}
    files.update({f"data/share/man/man1/{n}": (text, False) for n, text in manual_pages(wheel).items()})
    add_to_wheel(wheel, files)
    return name


def manual_pages(wheel):
    """{file name: roff} from `gapscope man DIR` run with the wheel's executable; none (and a
    note) when it cannot run here, as in a cross build."""
    with zipfile.ZipFile(wheel) as w, tempfile.TemporaryDirectory() as tmp:
        script = next(n for n in w.namelist() if n.endswith(".data/scripts/gapscope"))
        exe = os.path.join(tmp, "gapscope")
        with open(exe, "wb") as f:
            f.write(w.read(script))
        os.chmod(exe, stat.S_IRWXU)
        pages = os.path.join(tmp, "man1")
        try:
            subprocess.run([exe, "man", pages], check=True, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"gapscope_build: no manual pages in the wheel ({e})", flush=True)
            return {}
        out = {}
        for n in sorted(os.listdir(pages)):
            with open(os.path.join(pages, n), "rb") as f:
                out[n] = f.read()
        return out


def injection_library():
    """Path of the cdylib cargo builds with the wheel's profile (from cargo's own messages, so
    CARGO_TARGET_DIR and --target layouts are followed)."""
    cargo = os.environ.get("CARGO", "cargo")
    command = [
        cargo,
        "build",
        "--lib",
        "--profile",
        PROFILE,
        "--message-format",
        "json-render-diagnostics",
        "--manifest-path",
        os.path.join(PROJECT, "Cargo.toml"),
    ]
    print("Running `{}`".format(" ".join(command)), flush=True)
    out = subprocess.run(command, stdout=subprocess.PIPE, check=True).stdout
    found = None
    for line in out.decode(errors="replace").splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") != "compiler-artifact":
            continue
        if "cdylib" not in message.get("target", {}).get("crate_types", []):
            continue
        for filename in message.get("filenames", []):
            if os.path.basename(filename) == LIB_NAME:
                found = filename
    if found is None:
        sys.exit(f"gapscope_build: cargo built no {LIB_NAME}")
    return found


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def add_to_wheel(wheel, files):
    """Rewrites `wheel` with `files` ({path under `<dist>.data/`: (bytes, executable)}) added
    and its RECORD updated."""
    with zipfile.ZipFile(wheel) as old:
        entries = [(info, old.read(info)) for info in old.infolist()]
    record_name = next(i.filename for i, _ in entries if i.filename.endswith(".dist-info/RECORD"))
    data_dir = record_name[: -len(".dist-info/RECORD")] + ".data"
    added = {f"{data_dir}/{path}": content for path, content in files.items()}
    tmp = wheel + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as new:
        record = None
        for info, data in entries:
            if info.filename == record_name:
                record = data
            elif info.filename not in added:
                new.writestr(info, data)
        rows = [r for r in csv.reader(io.StringIO(record.decode())) if r and r[0] not in added]
        for target, (payload, executable) in added.items():
            info = zipfile.ZipInfo(target, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = ((0o100755 if executable else 0o100644) & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            new.writestr(info, payload)
            rows.insert(len(rows) - 1, [target, _record_hash(payload), str(len(payload))])
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        new.writestr(zipfile.ZipInfo(record_name, date_time=(1980, 1, 1, 0, 0, 0)), text.getvalue())
    os.replace(tmp, wheel)
