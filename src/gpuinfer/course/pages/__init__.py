"""What each chapter computes for its figures and tables, one module a chapter (named as
its notebook, as `course.exercises` is): a page calls one function per figure or table
and glues what it returns (`book.glue_all`), so its code cells show the idea, not the
bookkeeping. The formulas themselves live in `predict` and `measure`; these functions
assemble them into the rows a page shows, and are tested in `tests/test_pages_*.py`.
"""
