#!/bin/sh
# fake_remote_shell.sh HOST COMMAND — a stand-in for ssh in the tests of
# `strata launch --hosts`: runs COMMAND through /bin/sh on this machine, in an
# environment as bare as a fresh ssh login's (only PATH and HOME), so that
# whatever launch must pass to the remote side has to be on the command line.
# The host "unreachable" fails as ssh does when it cannot connect (255).
host=$1
shift
if [ "$host" = unreachable ]; then
  echo "ssh: connect to host $host port 22: Connection refused" >&2
  exit 255
fi
exec env -i PATH=/usr/bin:/bin HOME="$HOME" /bin/sh -c "$*"
