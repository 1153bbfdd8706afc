"""Evaluation: batched greedy decoding, exact match and its breakdowns.

Imports the stages before it (problems, text, model), never training.
"""
