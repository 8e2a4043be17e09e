"""The ground floor of core: what every other room (and the rest of the project) uses.

- limits: every upper bound on an input, with its reason;
- files, bounded, net: the one bounded way to read a file, to make an HTTP request, to resolve
  and connect (each bounded in time and size);
- errors: the one error type users see (KimiError: a code and a way out);
- check, table: one check's outcome, and plain-text tables for people.

May import: nothing of the project outside this room (the standard library only).
"""
