//! Engines for low-dimensional data (maps, point clouds, sky catalogues), where a spatial
//! index visits a few points a query instead of all of them: `kdtree.rs`, the exact kd-tree
//! on the CPU's threads.

pub(crate) mod kdtree;
