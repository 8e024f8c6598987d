//! `libculprit_rt.so`: the `-finstrument-functions` runtime (work in progress).
