# Sourced by scripts/run.sh and scripts/test.sh: one rule for when .venv needs pip.
#
# ensure_venv EXTRAS creates .venv when missing and installs the project (editable) with EXTRAS (a
# comma-separated list, "" for none) only when the install is not known to be current: the stamp
# .venv/.tubemq-gateway-install holds a key of the install's inputs (pyproject.toml, which names every
# dependency and how the package is built; setup.py and the C sources of the optional extensions, which
# the install compiles in place; the tree's path, which the editable install points at; the venv's Python)
# and the extras installed with it. Python source edits need no install (the install is editable), so a
# second start runs no pip at all, and works without a package index.
# TUBEMQ_GATEWAY_REINSTALL=1 installs regardless.

_venv_key() {
    local sha=sha256sum
    command -v sha256sum >/dev/null || sha="shasum -a 256" # macOS
    {
        cat pyproject.toml
        if [ -f setup.py ]; then cat setup.py; fi
        if [ -d gateway ]; then find gateway -name '*.c' | LC_ALL=C sort | xargs -r cat; fi
        pwd -P
        .venv/bin/python -c 'import sys; print(sys.version)'
    } |
        $sha | cut -d' ' -f1
}

# Whether the comma-separated extras $2 are all among the comma-separated extras $1.
_extras_cover() {
    local want
    for want in ${2//,/ }; do
        case ",$1," in *",$want,"*) ;; *) return 1 ;; esac
    done
}

ensure_venv() {
    local extras=$1 stamp=.venv/.tubemq-gateway-install key have_key="" have_extras=""
    if [ ! -x .venv/bin/python ]; then
        "${PYTHON:-python3}" -m venv .venv
    fi
    key=$(_venv_key)
    if [ -f "$stamp" ]; then
        read -r have_key have_extras <"$stamp" || true
    fi
    if [ "${TUBEMQ_GATEWAY_REINSTALL:-0}" != 1 ] && [ "$have_key" = "$key" ] && [ -x .venv/bin/tubemq-gateway ] &&
        _extras_cover "$have_extras" "$extras"; then
        return 0
    fi
    # Extras installed under the same key stay installed; a changed key starts the list again.
    local installed=$extras
    if [ "$have_key" = "$key" ] && [ -n "$have_extras" ]; then
        installed=$have_extras${extras:+,$extras}
    fi
    rm -f "$stamp"
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
    echo "$key $installed" >"$stamp"
}
