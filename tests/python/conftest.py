import os
import tempfile

# Generated code compiled by tests goes to one throwaway folder per run unless the runner chose
# one (scripts/test.sh shares the C++ tests' cache).
os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-pytest-cache-"))
