"""Text: how a problem is written as tokens (the formats, their tokenizers and traces).

Imports only ``arith.problems``.
"""
