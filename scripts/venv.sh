# Sourced by the examples' setup scripts: a Python virtual environment
# under .cache/ with pinned wheels from PyPI, made once.
#
#   . scripts/venv.sh
#   venv_setup NAME "IMPORTS" PACKAGE==VERSION...
#
# makes .cache/NAME (relative to the working directory, the repository root)
# unless it is there and `python -c "import IMPORTS"` works in it, and prints
# its python on stdout. Needs python3 with its venv module (on Debian:
# python3-venv, installed with apt-get when missing and running as root) and
# network access to PyPI the first time. Messages go to stderr, prefixed by
# $VENV_SAY (the calling script's name).

venv_say() {
    echo "${VENV_SAY:-scripts/venv.sh}: $*" >&2
}

venv_ready() {
    [ -x "$1/bin/python" ] && "$1/bin/python" -c "import $2" >/dev/null 2>&1
}

venv_setup() {
    venv=.cache/$1
    imports=$2
    shift 2
    if venv_ready "$venv" "$imports"; then
        printf '%s\n' "$PWD/$venv/bin/python"
        return 0
    fi
    mkdir -p .cache
    rm -rf "$venv"
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m venv "$venv" >/dev/null 2>&1; then
        # Debian's python3 makes venvs only with python3-venv.
        rm -rf "$venv"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            venv_say "installing python3 and python3-venv with apt-get"
            apt-get update -qq >&2 &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >&2 || {
                venv_say "apt-get install python3 python3-venv failed"
                return 1
            }
        fi
        python3 -m venv "$venv" || {
            venv_say "cannot create a Python virtual environment at $venv (install python3 and python3-venv)"
            rm -rf "$venv"
            return 1
        }
    fi
    venv_say "installing $* from PyPI into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: "$@" >&2 || {
        venv_say "pip install from PyPI failed (no network, or no wheel of one of $* for this Python and platform)"
        rm -rf "$venv"
        return 1
    }
    if ! venv_ready "$venv" "$imports"; then
        venv_say "installed, but '$venv/bin/python -c \"import $imports\"' fails:"
        "$venv/bin/python" -c "import $imports" >&2 || true
        rm -rf "$venv"
        return 1
    fi
    printf '%s\n' "$PWD/$venv/bin/python"
}
