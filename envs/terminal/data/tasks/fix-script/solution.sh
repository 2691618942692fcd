#!/bin/bash
set -eu
cat > /work/greet.sh <<'SCRIPT'
#!/bin/bash
# Print a greeting for the name given as the first argument (default: world).
name=${1:-}
if [ -z "$name" ]; then
  name=world
fi
echo "Hello, $name!"
SCRIPT
