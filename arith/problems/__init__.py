"""Problems: operands as digit arrays and their exact answers, carry chains (numpy only).

The first stage of a run; it imports no other stage.
"""
