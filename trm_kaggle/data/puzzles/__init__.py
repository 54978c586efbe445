"""Grid puzzles from CSV or generated: Sudoku (`sudoku.py`; its solver and generator `sudoku_solver.py`), mazes
(`maze.py`) and the shared grid builders (`grids.py`)."""
