//! culprit testbed (work in progress).
