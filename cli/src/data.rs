//! Loading data directories (work in progress).
