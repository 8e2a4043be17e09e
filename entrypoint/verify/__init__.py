"""`kimi-serve verify`: client.py talks HTTP (deadlines, size caps), questions.py holds what is
asked and how answers are judged, checks.py the checks and their hints, run.py runs them, and
report.py holds the verdicts."""
