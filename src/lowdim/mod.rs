//! Engines for low-dimensional data, where a spatial index visits a few points a query
//! instead of all of them: few coordinates (maps, point clouds, sky catalogues) or few
//! degrees of freedom in many (images of one object, spectra, cell states). `kdtree.rs`, the
//! exact kd-tree on the CPU's threads; `grid.rs`, the GPU grid's cells and what its answers
//! prove; `hybrid.rs`, the two together on one queue of query rows; `covertree/`, the cover
//! tree for any number of columns; `job.rs`, what the trees are asked and how a row's answer
//! is taken from their points; `order.rs`, the curve that points are stored and queries
//! answered along.

pub(crate) mod covertree;
mod grid;
pub(crate) mod hybrid;
pub(crate) mod job;
pub(crate) mod kdtree;
mod order;
