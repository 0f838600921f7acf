#!/usr/bin/env bash
# Rebuilds assets/fonts/DejaVuSans-subset.ttf: Basic Latin and Latin-1 plus the glyphs of DejaVu Sans
# that egui's default fonts lack and tessera's text uses (Greek, sub/superscripts such as ᵀ and ᵢ,
# arrows, ‖, ∇, ⌈⌉, ⟨⟩ …). The workbench adds it as the last fallback of both font families
# (src/gui/fonts.rs); the PNG figures (src/plot.rs) draw all their text with it.
# Needs Debian's fonts-dejavu-core and Python 3; fonttools is installed into a throwaway venv.
set -euo pipefail
cd "$(dirname "$0")/.."
src=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
[ -f "$src" ] || { echo "missing $src: apt-get install fonts-dejavu-core" >&2; exit 1; }
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q fonttools
"$venv/bin/pyftsubset" "$src" \
  --unicodes="U+0020-007E,U+00A0-00FF,U+0300-036F,U+0370-03FF,U+1D00-1DBF,U+2000-206F,U+2070-209F,U+2100-214F,U+2190-21FF,U+2200-22FF,U+2300-23FF,U+25A0-25FF,U+27E8-27E9" \
  --output-file=assets/fonts/DejaVuSans-subset.ttf
cp /usr/share/doc/fonts-dejavu-core/copyright assets/fonts/LICENSE-DejaVu.txt
echo "wrote assets/fonts/DejaVuSans-subset.ttf ($(stat -c %s assets/fonts/DejaVuSans-subset.ttf) bytes)"
