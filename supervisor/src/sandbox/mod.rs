//! Linux process side of an iteration (in progress).
