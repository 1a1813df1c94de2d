#!/bin/sh
# The image's one entry point (ops/Dockerfile): its first argument names the
# process or command, the rest are that one's flags.
#   control-plane            the control plane (HTTP API on PORT, control channel on GRPC_PORT)
#   edge-agent               an edge agent; AGENT_TOKEN, or AGENT_TOKEN_FILE naming a file that holds it
#   agent-token-file FILE    issues an agent token into FILE unless FILE already holds one (compose's one-shot)
#   migrate | admin-create | agent-token   the control plane's commands (npm run migrate, admin:create, agent-token)
#   anything else            run as given (sh, node ...)
set -eu
cd "${APP_DIR:-/app}"

case "${1:-control-plane}" in
  control-plane)
    [ "$#" -gt 0 ] && shift
    exec node --max-semi-space-size=16 control-plane/src/main.ts "$@" ;;
  edge-agent)
    shift
    if [ -z "${AGENT_TOKEN:-}" ] && [ -n "${AGENT_TOKEN_FILE:-}" ]; then
      AGENT_TOKEN=$(cat "$AGENT_TOKEN_FILE")
      export AGENT_TOKEN
    fi
    unset AGENT_TOKEN_FILE
    exec node edge-agent/src/main.ts "$@" ;;
  agent-token-file)
    file=${2:?agent-token-file needs the file to write}
    if [ -s "$file" ]; then
      echo "agent-token-file: $file already holds a token"
      exit 0
    fi
    # The command prints the token once; it goes to the file (mode 0600), never to the output.
    umask 077
    out=$(node control-plane/src/cli/agent-token.ts create --name "${AGENT_TOKEN_NAME:-compose edge agents}" \
      --description "Issued by the agent-token service of ops/compose.yaml into $file")
    printf '%s\n' "$out" | sed -n 's/^Token (.*AGENT_TOKEN): \(.*\)$/\1/p' > "$file.tmp"
    if [ ! -s "$file.tmp" ]; then
      echo "agent-token-file: the agent-token command printed no token" >&2
      exit 1
    fi
    mv "$file.tmp" "$file"
    printf '%s\n' "$out" | grep -v '^Token ' || true
    echo "agent-token-file: token written to $file" ;;
  migrate)
    shift
    exec node control-plane/src/db/migrate-cli.ts "$@" ;;
  admin-create)
    shift
    exec node control-plane/src/cli/admin-create.ts "$@" ;;
  agent-token)
    shift
    exec node control-plane/src/cli/agent-token.ts "$@" ;;
  *)
    exec "$@" ;;
esac
