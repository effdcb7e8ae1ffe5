#!/usr/bin/env bash
# Installs the ps Python package (its Python files and the extension module
# built here) for use outside the repository:
#   bazel run //ps/python:install -- [SITE_DIR]
# SITE_DIR (relative to where bazel was run) gets a ps/ directory; without
# it: the active virtualenv's site-packages ($VIRTUAL_ENV), else the user
# site directory of /usr/bin/python3 (PS_PYTHON). An older ps/ there is
# replaced. Ends by importing the installed package.
set -euo pipefail
python=${PS_PYTHON:-/usr/bin/python3}
here=${RUNFILES_DIR:-$0.runfiles}/ps/ps/python/ps
[ -f "$here/_ps.abi3.so" ] || { echo "install: the built package is not at $here" >&2; exit 1; }

if [ $# -ge 1 ]; then
  dest=$1
  case $dest in /*) ;; *) dest="${BUILD_WORKING_DIRECTORY:-$PWD}/$dest" ;; esac
elif [ -n "${VIRTUAL_ENV:-}" ]; then
  python="$VIRTUAL_ENV/bin/python"
  dest=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
else
  dest=$("$python" -m site --user-site)
fi

mkdir -p "$dest"
rm -rf "$dest/ps.installing"
mkdir "$dest/ps.installing"
cp "$here"/*.py "$here/_ps.abi3.so" "$dest/ps.installing/"
chmod u+w "$dest/ps.installing"/*
rm -rf "$dest/ps"
mv "$dest/ps.installing" "$dest/ps"
(cd / && PYTHONPATH="$dest${PYTHONPATH:+:$PYTHONPATH}" "$python" -c \
  'import ps, os; print("ps installed in", os.path.dirname(ps.__file__))')
