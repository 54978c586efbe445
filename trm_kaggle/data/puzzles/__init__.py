"""Grid puzzles from CSV or generated: Sudoku (`sudoku.py`), mazes (`maze.py`) and the shared grid builders
(`grids.py`)."""
