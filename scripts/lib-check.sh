# Shared by scripts/test-package and scripts/test-newcomer (sourced, not run): the root rule,
# pass/fail counting, and purging the culprit package on the way out.

# need_root NAME WHY: in CI (CI=true) a missing privilege fails; elsewhere the script is skipped
# with the reason.
need_root() {
  [ "$(id -u)" -eq 0 ] && return 0
  if [ "${CI:-}" = true ]; then
    echo "$1: FAILED: needs root ($2); CI runs as root" >&2
    exit 1
  fi
  echo "$1: skipped: needs root ($2)" >&2
  exit 0
}

passed=0
failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAILED: $*" >&2; failed=$((failed + 1)); }
# check DESCRIPTION COMMAND...: runs the command and counts the result.
check() {
  local what=$1
  shift
  if "$@"; then ok "$what"; else fail "$what"; fi
}
# finish NAME: the closing line; the exit status says whether every check passed.
finish() {
  echo "$1: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

# culprit_installed: the culprit package is known to dpkg (installed, or its conffiles left).
culprit_installed() {
  local s
  s=$(dpkg-query -W -f='${db:Status-Status}' culprit 2>/dev/null) && [ -n "$s" ] &&
    [ "$s" != not-installed ]
}
purge_culprit() { if culprit_installed; then dpkg --purge culprit >/dev/null 2>&1 || true; fi; }
