//! PLACEHOLDER — tiling.
