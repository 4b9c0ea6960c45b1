# Shared by bin/magnetar and bin/test: a virtual environment in .venv, reinstalled when
# pyproject.toml changes or when a new set of extras is asked for.
VENV="$root/.venv"
ensure_venv() {
  extras="$1"
  stamp="$VENV/.installed$extras"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q -e "$root$extras"
    touch "$stamp"
  fi
}
