"""`python run.py plan`: capacity planning over deployments and speculation policies.

config.py (the plan file and options), search.py (one capacity search), cache.py (finished
searches on disk), report.py (plan.csv, the summary section, the plot), cli.py (the command).
"""
