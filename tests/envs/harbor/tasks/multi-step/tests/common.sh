# Sourced by each step's test.sh (uploaded with it into /tests).
CONFIG=/srv/project/app.ini
finish() {  # finish REWARD MESSAGE
  echo "$2"
  echo "$1" > /logs/verifier/reward.txt
  exit 0
}
has_line() { grep -qxF "$1" "$CONFIG" 2>/dev/null; }
