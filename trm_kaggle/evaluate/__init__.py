"""Evaluation: predictions -> votes -> metrics, reports and Kaggle submissions."""
