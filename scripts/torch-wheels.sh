# Sourced by setup-torch.sh and setup-deepinv.sh: checks for the tools lean mode needs and installs
# torch-based packages into a virtual environment from a local wheel cache.
#
# The caller sets MODE (lean | full), VENV, WHEELS and HERE (the scripts folder). Lean mode installs
# torch without its CUDA wheels and builds stub libraries in their place (scripts/lean_torch.py says
# why); full mode installs what PyPI declares. The package mirror sends no cache validators, so pip's
# HTTP cache keeps nothing: the wheels are kept in $WHEELS, and `pip download -d` skips files already
# there.

# require_lean_tools SETTING: in lean mode, exits unless cc, readelf and nm are present (SETTING is
# the environment variable that selects full mode, for the message).
require_lean_tools() {
    [[ "$MODE" == lean ]] || return 0
    local tool
    for tool in cc readelf nm; do
        command -v "$tool" >/dev/null || {
            echo "lean mode needs '$tool' (apt-get install build-essential), or set $1=full" >&2
            exit 1
        }
    done
}

# install_torch_packages TOP... [-- EXTRA...]: creates $VENV afresh and installs the TOP packages
# (torch among them) and EXTRA ones (plain dependencies, e.g. numpy) in $MODE.
install_torch_packages() {
    local top=() extra=()
    while (($#)); do
        [[ "$1" == -- ]] && { shift; extra=("$@"); break; }
        top+=("$1")
        shift
    done
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")" "$WHEELS"
    "$PY" -m venv "$VENV"
    local pip=("$VENV/bin/pip" --disable-pip-version-check)
    if [[ "$MODE" == full ]]; then
        "${pip[@]}" download -q -d "$WHEELS" "${top[@]}" "${extra[@]}"
        "${pip[@]}" install -q --no-index --find-links "$WHEELS" "${top[@]}" "${extra[@]}"
        return
    fi
    "${pip[@]}" download -q --no-deps -d "$WHEELS" "${top[@]}"
    # The dependencies of the top packages, less each other and the CUDA wheels, from their metadata.
    local deps
    mapfile -t deps < <("$VENV/bin/python" "$HERE/lean_torch.py" deps "$WHEELS" "${top[@]}")
    deps+=("${extra[@]}")
    "${pip[@]}" download -q -d "$WHEELS" "${deps[@]}"
    "${pip[@]}" install -q --no-index --find-links "$WHEELS" "${deps[@]}"
    "${pip[@]}" install -q --no-index --find-links "$WHEELS" --no-deps "${top[@]}"
    local site
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$VENV/bin/python" "$HERE/lean_torch.py" stubs "$site"
}
