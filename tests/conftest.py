import os
import sys

# Test helper modules (tests/_*.py) import by bare name under --import-mode=importlib.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
