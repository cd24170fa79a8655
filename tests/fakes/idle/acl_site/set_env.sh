# A stand-in for CANN's set_env.sh: what the real one does that matters here
# is putting the toolkit's python/site-packages (where acl lives) on PYTHONPATH.
fake_site="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PYTHONPATH="$fake_site${PYTHONPATH:+:$PYTHONPATH}"
export ASCEND_HOME_PATH="$fake_site"
echo "this line goes to /dev/null in the probe"
