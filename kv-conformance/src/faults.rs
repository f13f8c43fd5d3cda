//! A fault-injecting backend wrapper (filled in below).
