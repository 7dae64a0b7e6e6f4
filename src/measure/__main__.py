"""`python -m src.measure ...` = `python run.py measure ...`, for machines that have PyTorch but
not the study's plotting dependencies (this path imports only numpy and the standard library)."""
import sys

from src.measure.cli import main

raise SystemExit(main(sys.argv[1:]))
