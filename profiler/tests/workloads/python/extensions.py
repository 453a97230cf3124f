"""Imports every extension module of DIRECTORY (the first argument: `ext_N` modules, copies of
one), then burns as shares.py does for SECONDS (the second): a service that loaded hundreds of
extension modules before it got to work. Prints `main TID` once they are all imported."""
import importlib
import os
import runpy
import sys

directory, seconds = sys.argv[1], sys.argv[2]
sys.path.insert(0, directory)
for name in sorted(entry.split(".")[0] for entry in os.listdir(directory) if entry.startswith("ext_")):
    importlib.import_module(name)
sys.argv = [os.path.join(os.path.dirname(__file__), "shares.py"), seconds]
runpy.run_path(sys.argv[0], run_name="__main__")
