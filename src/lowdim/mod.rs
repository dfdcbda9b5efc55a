//! Engines for low-dimensional data (maps, point clouds, sky catalogues), where a spatial
//! index visits a few points a query instead of all of them: `kdtree.rs`, the exact kd-tree
//! on the CPU's threads; `grid.rs`, the GPU grid's cells and what its answers prove;
//! `hybrid.rs`, the two together on one queue of query rows; `order.rs`, the curve
//! that points are stored and queries answered along.

mod grid;
pub(crate) mod hybrid;
pub(crate) mod kdtree;
mod order;
