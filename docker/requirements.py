"""Prints pyproject.toml's dependencies, one per line, leaving out the distributions named after the file."""

import re
import sys
import tomllib

with open(sys.argv[1], "rb") as source:
    dependencies = tomllib.load(source)["project"]["dependencies"]
leave_out = {name.lower() for name in sys.argv[2:]}
for requirement in dependencies:
    if re.split(r"[\s<>=!~\[;(]", requirement, maxsplit=1)[0].lower() not in leave_out:
        print(requirement)
