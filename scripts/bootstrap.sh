# Sourced by the scripts: make sure uv exists (pinned, installed from PyPI with pip when
# missing) and that .venv matches uv.lock. Needs only python3 with pip.
UV_VERSION="0.13.9"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v uv >/dev/null 2>&1; then
  if [ ! -x "$ROOT/.tools/uv/bin/uv" ]; then
    echo "installing uv==$UV_VERSION into .tools/uv" >&2
    # --target keeps it out of the system site-packages (works on PEP 668 systems too)
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --target "$ROOT/.tools/uv" "uv==$UV_VERSION" >&2
  fi
  export PATH="$ROOT/.tools/uv/bin:$PATH"
fi
(cd "$ROOT" && uv sync --frozen --all-packages --quiet)
