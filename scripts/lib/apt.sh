# Debian package availability for scripts/setup.sh (sourced). Safe under `set -euo pipefail`:
# nothing here pipes into a reader that may exit early (`apt-cache policy p | grep -q` dies of
# SIGPIPE, exit 141, and pipefail then calls an available package unavailable).
#
# An optional package found unavailable is remembered together with the apt lists it was looked
# up in, so that a second setup stays fast; the answer is dropped as soon as the lists change
# (an `apt-get update` that brought something new), and looked up again.

TESTBED_UNAVAILABLE_LIST="${TESTBED_UNAVAILABLE_LIST:-/var/lib/testbed/unavailable-packages}"
APT_LISTS_DIR="${APT_LISTS_DIR:-/var/lib/apt/lists}"

# apt_candidate PKG: the version apt would install ("" when there is none).
apt_candidate() {
  local policy line
  policy="$(apt-cache policy "$1" 2>/dev/null)" || return 0
  while IFS= read -r line; do
    case "$line" in
      *"Candidate: "*)
        line="${line#*Candidate: }"
        [ "$line" = "(none)" ] || printf '%s\n' "$line"
        return 0 ;;
    esac
  done <<<"$policy"
}

# apt_available PKG: whether apt can install PKG from the current lists.
apt_available() {
  [ -n "$(apt_candidate "$1")" ]
}

# apt_lists_stamp: when the newest of the apt lists was published (0 before any apt-get update).
apt_lists_stamp() {
  local newest=0 file when
  for file in "$APT_LISTS_DIR"/*Release; do
    [ -e "$file" ] || continue
    when="$(stat -c %Y "$file")"
    if [ "$when" -gt "$newest" ]; then newest="$when"; fi
  done
  printf '%s\n' "$newest"
}

# remembered_unavailable PKG: PKG was found unavailable in the current apt lists.
remembered_unavailable() {
  local stamp pkg lists rest
  [ -f "$TESTBED_UNAVAILABLE_LIST" ] || return 1
  stamp="lists=$(apt_lists_stamp)"
  while read -r pkg lists rest; do
    if [ "$pkg" = "$1" ] && [ "$lists" = "$stamp" ]; then return 0; fi
  done <"$TESTBED_UNAVAILABLE_LIST"
  return 1
}

# remember_unavailable PKG: record that the current apt lists have no PKG.
remember_unavailable() {
  mkdir -p "$(dirname "$TESTBED_UNAVAILABLE_LIST")"
  printf '%s lists=%s checked=%s\n' "$1" "$(apt_lists_stamp)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    >>"$TESTBED_UNAVAILABLE_LIST"
}

# forget_stale_unavailable: drop what was recorded for other apt lists (and the old one-word entries).
forget_stale_unavailable() {
  local stamp pkg lists rest kept=()
  [ -f "$TESTBED_UNAVAILABLE_LIST" ] || return 0
  stamp="lists=$(apt_lists_stamp)"
  while read -r pkg lists rest; do
    if [ -n "$pkg" ] && [ "$lists" = "$stamp" ]; then kept+=("$pkg $lists $rest"); fi
  done <"$TESTBED_UNAVAILABLE_LIST"
  if [ "${#kept[@]}" -eq 0 ]; then
    rm -f "$TESTBED_UNAVAILABLE_LIST"
  else
    printf '%s\n' "${kept[@]}" >"$TESTBED_UNAVAILABLE_LIST.new"
    mv "$TESTBED_UNAVAILABLE_LIST.new" "$TESTBED_UNAVAILABLE_LIST"
  fi
}
