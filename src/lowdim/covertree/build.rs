//! Building the cover tree: the batch construction of Sharma's CTVC (separation kept among
//! siblings only), on the CPU's threads with its far sets built in parallel, or on a GPU
//! with every open set advanced a step at once (GCTVC, `shaders/cover_tree.wgsl`); both
//! laid out the same way for the queries.
//!
//! A node stands for a point e and the set S of points below it, each with its distance to
//! e. While S is not empty, the level drops to the largest power of two t below S's largest
//! distance: the points farther than t from e are peeled off into groups, each around the
//! first point f left (the points within t of f), and each group becomes a child of e,
//! built the same way and independently of its siblings; the points within t stay with e
//! for the next level. A child at level t lies within 2t of e, its points within t of it,
//! and siblings of one level more than t apart.

use rayon::prelude::*;

use super::space::Space;
use crate::data::MatrixRef;
use crate::error::{interrupted, Result};
use crate::gpu::BuiltSet;
use crate::lowdim::job::{PointRows, TreeJob};
use crate::metric::Metric;

/// Points of a set from which distances to its insert element are computed on every thread.
const PARALLEL_POINTS: usize = 4096;

/// One node of the tree. Node i stands for distinct point i.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Node {
    /// Children: nodes `first_child..first_child + children`.
    pub first_child: u32,
    pub children: u32,
    /// At least the true distance from the node's point to any point below it.
    pub radius: f64,
    /// Bounds on the true distance from the node's point to its parent's.
    pub parent_lo: f64,
    pub parent_hi: f64,
}

/// A cover tree over the distinct points of a corpus, built in memory. It holds its points'
/// tree vectors in node order, until [`Tree::rows_in_node_order`].
pub(crate) struct Tree {
    space: Space,
    nodes: Vec<Node>,
    vectors: Vec<f32>,
    rows: Vec<u32>,
    first: Vec<u32>,
}

/// A cover tree's arrays, wherever they are held: built in memory ([`Tree::view`]) or
/// mapped from a saved index ([`TreeRef::from_parts`]).
#[derive(Clone, Copy)]
pub(crate) struct TreeRef<'a> {
    pub(super) space: Space,
    /// Node 0 is the root; a node's children are consecutive, and each subtree's nodes
    /// follow its parent's block, so that near points lie near in memory.
    pub(super) nodes: &'a [Node],
    vectors: Vectors<'a>,
    /// Rows of point p: `rows[first[p]..first[p + 1]]`, ascending; the first stands for it.
    rows: &'a [u32],
    first: &'a [u32],
}

/// Where a tree's points lie.
#[derive(Clone, Copy)]
enum Vectors<'a> {
    /// The tree vector of each point, `dims` values each, in node order: unit rows for cosine
    /// and correlation, and copies of the rows in a tree built for one job.
    Placed(&'a [f32]),
    /// The corpus rows themselves, laid out in node order (`rows`' order), a point being its
    /// first row: a saved index's euclidean tree, which so holds each row once.
    Rows(&'a [f32]),
}

impl PointRows for TreeRef<'_> {
    fn rows_of(&self, p: usize) -> &[u32] {
        &self.rows[self.first[p] as usize..self.first[p + 1] as usize]
    }
}

/// A node while the tree is built.
struct Built {
    point: u32,
    radius: f64,
    parent: (f64, f64),
    children: Vec<Built>,
}

impl Tree {
    /// The tree of `job.corpus` in the space of `job.metric`, built where `on` says; `None`
    /// where the job was interrupted.
    pub(super) fn of(job: &TreeJob<'_>, on: Builder<'_>) -> Result<Option<Tree>> {
        let (corpus, d) = (job.corpus, job.corpus.cols());
        let space = Space::new(job.metric, d, Space::centring_of(job.metric, corpus));
        let (rows, first) = distinct_rows(corpus);
        let points = first.len() - 1;
        let mut placed = vec![0f32; points * d];
        placed.par_chunks_mut(d.max(1)).enumerate().for_each(|(p, out)| {
            space.place(corpus.row(rows[first[p] as usize] as usize), out);
        });
        crate::trace::mark(|| format!("cover tree: {points} distinct points"));
        // Lay the nodes out: each node's children as one block, then each child's subtree.
        let (nodes, order) = match on {
            Builder::Gpu(gpu) if points > 1 => match gpu.build_cover_tree(&placed, d, &job.interrupt)? {
                Some(sets) => lay_out_sets(&sets, &space.flushing_subnormals()),
                None => return Ok(None),
            },
            _ => {
                let builder = CpuBuilder { space: &space, vectors: &placed, d, job };
                let members: Vec<(f64, u32)> =
                    (1..points as u32).into_par_iter().map(|p| (builder.sq(0, p), p)).collect();
                let root = builder.build(0, members);
                if interrupted(&job.interrupt) {
                    return Ok(None);
                }
                let mut nodes = Vec::with_capacity(points);
                let mut order = Vec::with_capacity(points);
                nodes.push(Node { first_child: 0, children: 0, radius: root.radius, parent_lo: 0.0, parent_hi: 0.0 });
                order.push(root.point);
                lay_out(&root, 0, &mut nodes, &mut order);
                (nodes, order)
            }
        };
        crate::trace::mark(|| "cover tree: built".to_string());
        let mut vectors = vec![0f32; points * d];
        vectors.par_chunks_mut(d.max(1)).zip(order.par_iter()).for_each(|(out, &p)| {
            out.copy_from_slice(&placed[p as usize * d..][..d]);
        });
        let mut node_rows = Vec::with_capacity(rows.len());
        let mut node_first = Vec::with_capacity(points + 1);
        for &p in &order {
            node_first.push(node_rows.len() as u32);
            node_rows.extend_from_slice(&rows[first[p as usize] as usize..first[p as usize + 1] as usize]);
        }
        node_first.push(node_rows.len() as u32);
        Ok(Some(Tree { space, nodes, vectors, rows: node_rows, first: node_first }))
    }

    /// The tree's arrays, to be searched. Only before [`Tree::rows_in_node_order`]: after
    /// it, [`TreeRef::of`] its parts over the corpus.
    pub(crate) fn view(&self) -> TreeRef<'_> {
        let vectors = Vectors::Placed(&self.vectors);
        TreeRef { space: self.space, nodes: &self.nodes, vectors, rows: &self.rows, first: &self.first }
    }

    /// Where the tree vectors are copies of the corpus rows (euclidean metrics), drops them
    /// and gives `corpus` laid out in node order instead, for [`TreeRef::of`]: a tree kept
    /// beside its corpus, as an index keeps it, then holds each row once.
    pub(crate) fn rows_in_node_order(&mut self, corpus: MatrixRef<'_>) -> Option<Vec<f32>> {
        if !Space::places_rows_as_given(self.space.metric()) {
            return None;
        }
        let placed = std::mem::take(&mut self.vectors);
        if self.rows.len() == self.nodes.len() {
            // Every row its own point: the placed copies are the rows in node order already.
            return Some(placed);
        }
        drop(placed);
        let d = corpus.cols();
        let mut out = vec![0f32; corpus.rows() * d];
        out.par_chunks_mut(d.max(1))
            .zip(self.rows.par_iter())
            .for_each(|(o, &r)| o.copy_from_slice(corpus.row(r as usize)));
        Some(out)
    }
}

/// The arrays of a tree, as a saved index holds them.
pub(crate) struct Parts<'a> {
    pub metric: Metric,
    pub dims: usize,
    /// [`Space::centring_of`] the corpus.
    pub centring: f64,
    pub nodes: &'a [Node],
    /// Tree vectors in node order; none where the metric places rows as given
    /// ([`Space::places_rows_as_given`]): the corpus rows are the points then.
    pub vectors: &'a [f32],
    pub rows: &'a [u32],
    pub first: &'a [u32],
}

impl<'a> TreeRef<'a> {
    /// The tree of `parts`, which [`TreeRef::check`] has passed, over `corpus`: the corpus
    /// rows in node order where the metric places rows as given ([`Tree::rows_in_node_order`]).
    pub(crate) fn of(parts: &Parts<'a>, corpus: &'a [f32]) -> Self {
        let space = Space::new(parts.metric, parts.dims, parts.centring);
        let vectors = match Space::places_rows_as_given(parts.metric) {
            true => Vectors::Rows(corpus),
            false => Vectors::Placed(parts.vectors),
        };
        TreeRef { space, nodes: parts.nodes, vectors, rows: parts.rows, first: parts.first }
    }

    /// Whether `parts` over a corpus of `corpus_rows` rows make a tree that every query can
    /// descend: sizes that agree, every row once, every node below the root once and after
    /// its parent, bounds that are numbers. Says what is wrong where they do not.
    pub(crate) fn check(parts: &Parts<'_>, corpus_rows: usize) -> std::result::Result<(), String> {
        let &Parts { metric, dims, centring, nodes, vectors, rows, first } = parts;
        let points = nodes.len();
        if !(centring.is_finite() && centring >= 0.0) {
            return Err(format!("centring error {centring} is not a number >= 0"));
        }
        if rows.len() != corpus_rows || points == 0 || points > corpus_rows {
            return Err(format!("{} rows and {points} points for a corpus of {corpus_rows} rows", rows.len()));
        }
        let placed = if Space::places_rows_as_given(metric) { 0 } else { points };
        if Some(vectors.len()) != placed.checked_mul(dims) {
            return Err(format!("{} vector values for {points} points of {dims} columns", vectors.len()));
        }
        if first.len() != points + 1 || first[0] != 0 || first[points] as usize != rows.len() {
            return Err(format!("{} row offsets for {points} points", first.len()));
        }
        if let Some(p) = first.windows(2).position(|w| w[0] >= w[1]) {
            return Err(format!("point {p} has no rows"));
        }
        let mut seen = vec![false; corpus_rows];
        for &r in rows {
            match seen.get_mut(r as usize) {
                Some(s) if !*s => *s = true,
                _ => return Err(format!("row {r} is out of range or listed twice")),
            }
        }
        // Children come after their parent, so that no descent can loop.
        let mut placed = vec![false; points];
        placed[0] = true;
        for (i, node) in nodes.iter().enumerate() {
            let bounds = [node.radius, node.parent_lo, node.parent_hi];
            if bounds.iter().any(|b| !b.is_finite()) || node.radius < 0.0 {
                return Err(format!("node {i} has bounds {bounds:?}"));
            }
            if node.children == 0 {
                continue;
            }
            let children = (node.first_child as usize)..(node.first_child as usize + node.children as usize);
            if children.start <= i || children.end > points {
                return Err(format!("node {i} has children {children:?} of {points} nodes"));
            }
            for c in children {
                if std::mem::replace(&mut placed[c], true) {
                    return Err(format!("node {c} has two parents"));
                }
            }
        }
        if let Some(p) = placed.iter().position(|&p| !p) {
            return Err(format!("node {p} has no parent"));
        }
        Ok(())
    }

    /// The arrays to save: the tree vectors only where they are not the rows.
    pub(crate) fn parts(&self) -> Parts<'a> {
        let metric = self.space.metric();
        Parts {
            metric,
            dims: self.space.dims(),
            centring: self.space.centring(),
            nodes: self.nodes,
            vectors: match self.vectors {
                Vectors::Placed(v) if !Space::places_rows_as_given(metric) => v,
                _ => &[],
            },
            rows: self.rows,
            first: self.first,
        }
    }

    /// The tree vectors of every point, `dims` values each, in node order (gathered from the
    /// rows where the tree reads its points from them).
    pub(super) fn vectors(&self) -> std::borrow::Cow<'a, [f32]> {
        match self.vectors {
            Vectors::Placed(v) => std::borrow::Cow::Borrowed(v),
            Vectors::Rows(_) => {
                let d = self.space.dims();
                let mut out = vec![0f32; self.nodes.len() * d];
                out.par_chunks_mut(d.max(1)).enumerate().for_each(|(p, o)| o.copy_from_slice(self.vector(p)));
                std::borrow::Cow::Owned(out)
            }
        }
    }

    /// The tree vector of point `p`.
    #[inline]
    pub(super) fn vector(&self, p: usize) -> &'a [f32] {
        let d = self.space.dims();
        match self.vectors {
            Vectors::Placed(v) => &v[p * d..][..d],
            Vectors::Rows(rows) => &rows[self.first[p] as usize * d..][..d],
        }
    }

    /// The values of the corpus row that stands for point `p`, from `corpus` (the job's rows
    /// in their own order) unless the tree holds the rows itself.
    #[inline]
    pub(super) fn row_values<'c>(&self, p: usize, corpus: MatrixRef<'c>) -> &'c [f32]
    where
        'a: 'c,
    {
        match self.vectors {
            Vectors::Rows(_) => self.vector(p),
            Vectors::Placed(_) => corpus.row(self.row_of(p)),
        }
    }

    /// The corpus row that stands for point `p` (the lowest of its rows).
    #[inline]
    pub(super) fn row_of(&self, p: usize) -> usize {
        self.rows[self.first[p] as usize] as usize
    }

    /// Every corpus row, by the node of its point: the order in which a graph's rows are
    /// answered, so that consecutive queries meet the same nodes.
    pub(super) fn rows_in_node_order(&self) -> &'a [u32] {
        self.rows
    }
}

/// Where a tree is built: on the CPU's threads, or on a GPU (`shaders/cover_tree.wgsl`, the
/// same construction with every open set advanced at once).
#[derive(Clone, Copy)]
pub(crate) enum Builder<'g> {
    Cpu,
    Gpu(&'g crate::gpu::GpuEngine),
}

struct CpuBuilder<'a> {
    space: &'a Space,
    /// Tree vectors in the order of distinct points.
    vectors: &'a [f32],
    d: usize,
    job: &'a TreeJob<'a>,
}

impl CpuBuilder<'_> {
    fn sq(&self, a: u32, b: u32) -> f64 {
        let d = self.d;
        self.space.sq(&self.vectors[a as usize * d..][..d], &self.vectors[b as usize * d..][..d])
    }

    /// The node of point `e` over `members`, (squared distance to e, point) each.
    fn build(&self, e: u32, mut near: Vec<(f64, u32)>) -> Built {
        let radius = near.iter().map(|m| self.space.bounds(m.0).1).fold(0.0, f64::max);
        let mut children = Vec::new();
        while !near.is_empty() && !interrupted(&self.job.interrupt) {
            let farthest = near.iter().map(|m| m.0).fold(0.0, f64::max);
            if farthest == 0.0 {
                // Distinct points that no f32 distance tells apart from e: leaves of e.
                children.extend(near.drain(..).map(|(sq, p)| leaf(p, self.space.bounds(sq))));
                break;
            }
            let t_sq = level_below(farthest.sqrt()).powi(2);
            let mut far: Vec<(f64, u32)>;
            (near, far) = near.into_iter().partition(|m| m.0 <= t_sq);
            let mut groups = Vec::new();
            while !far.is_empty() {
                let (f_sq, f) = far[0];
                let to_f = |&(e_sq, x): &(f64, u32)| (self.sq(f, x), e_sq, x);
                let rest: Vec<(f64, f64, u32)> = if far.len() > PARALLEL_POINTS {
                    far[1..].par_iter().map(to_f).collect()
                } else {
                    far[1..].iter().map(to_f).collect()
                };
                let (group, others): (Vec<_>, Vec<_>) = rest.into_iter().partition(|m| m.0 <= t_sq);
                groups.push((f, f_sq, group.into_iter().map(|(sq, _, x)| (sq, x)).collect::<Vec<_>>()));
                far = others.into_iter().map(|(_, e_sq, x)| (e_sq, x)).collect();
            }
            let built: Vec<Built> = groups
                .into_par_iter()
                .map(|(f, f_sq, group)| Built { parent: self.space.bounds(f_sq), ..self.build(f, group) })
                .collect();
            children.extend(built);
        }
        Built { point: e, radius, parent: (0.0, 0.0), children }
    }
}

/// The nodes of the sets a GPU built (`gpu::cover_tree`), laid out as [`lay_out`] lays out
/// a tree built on the CPU, and the point of each node: each set a node, its children the
/// sets its peels made in the order made, their f32 distances bounded in `space`.
fn lay_out_sets(sets: &[BuiltSet], space: &Space) -> (Vec<Node>, Vec<u32>) {
    let bounds = |sq: f32| {
        let sq = f64::from(sq);
        if sq.is_finite() {
            space.bounds(sq)
        } else {
            (0.0, f64::INFINITY)
        }
    };
    // Each set's children, by counting sort on the parent (set 0, the root, has none).
    let n = sets.len();
    let mut first = vec![0u32; n + 1];
    for s in &sets[1..] {
        first[s.parent as usize + 1] += 1;
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut next = first.clone();
    let mut children = vec![0u32; n.saturating_sub(1)];
    for (i, s) in sets.iter().enumerate().skip(1) {
        children[next[s.parent as usize] as usize] = i as u32;
        next[s.parent as usize] += 1;
    }
    drop(next);
    // A set is made after its parent: sizes of subtrees from the last set back, then each
    // set's place from the first on. A node's children block comes first in its subtree's
    // span, then each child's subtree in order.
    let mut size = vec![1u32; n];
    for (i, s) in sets.iter().enumerate().skip(1).rev() {
        size[s.parent as usize] += size[i];
    }
    let (mut at, mut block) = (vec![0u32; n], vec![0u32; n]);
    block[0] = 1;
    for set in 0..n {
        let mine = &children[first[set] as usize..first[set + 1] as usize];
        let mut span = block[set] + mine.len() as u32;
        for (i, &c) in mine.iter().enumerate() {
            at[c as usize] = block[set] + i as u32;
            block[c as usize] = span;
            span += size[c as usize] - 1;
        }
    }
    let mut set_at = vec![0u32; n];
    for (set, &a) in at.iter().enumerate() {
        set_at[a as usize] = set as u32;
    }
    set_at
        .par_iter()
        .map(|&set| {
            let set = set as usize;
            let children = first[set + 1] - first[set];
            let parent = if set == 0 { (0.0, 0.0) } else { bounds(sets[set].parent_sq) };
            let node = Node {
                first_child: block[set],
                children,
                radius: if children > 0 { bounds(sets[set].radius_sq).1 } else { 0.0 },
                parent_lo: parent.0,
                parent_hi: parent.1,
            };
            (node, sets[set].point)
        })
        .unzip()
}

fn leaf(point: u32, parent: (f64, f64)) -> Built {
    Built { point, radius: 0.0, parent, children: Vec::new() }
}

/// The largest power of two below `distance` (> 0).
fn level_below(distance: f64) -> f64 {
    let mut t = 2f64.powi(distance.log2().ceil() as i32 - 1);
    while t >= distance {
        t *= 0.5;
    }
    while t * 2.0 < distance {
        t *= 2.0;
    }
    t
}

/// Appends the children of `node` (laid out at `at`) as one block, then each child's
/// subtree; `order` gets the point of each node appended.
fn lay_out(node: &Built, at: usize, nodes: &mut Vec<Node>, order: &mut Vec<u32>) {
    let first = nodes.len();
    nodes[at].first_child = first as u32;
    nodes[at].children = node.children.len() as u32;
    for child in &node.children {
        nodes.push(Node {
            first_child: 0,
            children: 0,
            radius: child.radius,
            parent_lo: child.parent.0,
            parent_hi: child.parent.1,
        });
        order.push(child.point);
    }
    for (i, child) in node.children.iter().enumerate() {
        lay_out(child, first + i, nodes, order);
    }
}

/// The rows of each distinct row of `rows`: `(rows, first)` with the rows of point p at
/// `rows[first[p]..first[p + 1]]`, ascending.
fn distinct_rows(corpus: MatrixRef<'_>) -> (Vec<u32>, Vec<u32>) {
    // -0.0 and +0.0 are one value (their distance is 0): `+ 0.0` makes both +0.0.
    let bits = |i: u32| corpus.row(i as usize).iter().map(|&x| (x + 0.0).to_bits());
    let mut rows: Vec<u32> = (0..corpus.rows() as u32).collect();
    rows.par_sort_unstable_by(|&a, &b| bits(a).cmp(bits(b)).then(a.cmp(&b)));
    let mut first: Vec<u32> = (0..rows.len())
        .into_par_iter()
        .filter(|&at| at == 0 || bits(rows[at - 1]).ne(bits(rows[at])))
        .map(|at| at as u32)
        .collect();
    first.push(rows.len() as u32);
    (rows, first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refine::NONE;

    /// The tree built on the CPU: see `check_tree`.
    #[test]
    fn the_tree_covers_every_point_within_its_radii() {
        let values = corpus_values();
        check_tree(&values, Builder::Cpu);
    }

    /// The same of a tree built on the GPU (`cover_tree.wgsl`), its dispatches cut to few
    /// workgroups a dimension so that the 2-D path runs too.
    #[test]
    fn the_gpu_tree_covers_every_point_within_its_radii() {
        let settings = crate::gpu::GpuSettings::for_tests(true, 3);
        let gpu = crate::gpu::GpuEngine::new(&settings, false)
            .unwrap_or_else(|e| panic!("GPU test without a usable adapter: {e}"));
        let values = corpus_values();
        check_tree(&values, Builder::Gpu(&gpu));
    }

    /// 300 rows of 4 columns: a lattice with repeated rows (+0.0 and -0.0 alike), and rows
    /// whose differences underflow in f32 (distinct points at f32 distance 0).
    fn corpus_values() -> Vec<f32> {
        let mut values = Vec::new();
        for i in 0..300u32 {
            let x = (i % 37) as f32 * 0.25;
            if i % 50 == 7 {
                values.extend([1e-30 * (i / 50) as f32, 0.0, 0.0, 0.0]);
                continue;
            }
            values.extend([x, (i % 11) as f32, -0.0 * x, (i / 7 % 5) as f32 * 1e-3]);
        }
        values
    }

    /// Every point is one node; radii and parent bounds hold the float64 distances; the rows
    /// of equal points are one point's.
    fn check_tree(values: &[f32], on: Builder<'_>) {
        let corpus = MatrixRef::new(values, 300, 4).unwrap();
        let exclude = vec![NONE; 300];
        let job =
            TreeJob { corpus, queries: corpus, exclude: &exclude, k: 1, metric: Metric::Euclidean, interrupt: None };
        let built = Tree::of(&job, on).unwrap().unwrap();
        let tree = built.view();
        let points = tree.nodes.len();
        assert_eq!(tree.rows.len(), 300);
        let mut distinct: Vec<Vec<u32>> =
            (0..300).map(|i| corpus.row(i).iter().map(|x| (x + 0.0).to_bits()).collect()).collect();
        distinct.sort();
        distinct.dedup();
        assert_eq!(points, distinct.len());
        let dist =
            |a: usize, b: usize| Metric::Euclidean.distance_f64(corpus.row(tree.row_of(a)), corpus.row(tree.row_of(b)));
        // Each node below node 0 exactly once; every point below a node within its radius.
        let mut seen = vec![false; points];
        seen[0] = true;
        fn below(tree: &TreeRef<'_>, n: usize, out: &mut Vec<usize>) {
            let node = tree.nodes[n];
            for c in node.first_child as usize..(node.first_child + node.children) as usize {
                out.push(c);
                below(tree, c, out);
            }
        }
        for n in 0..points {
            let mut under = Vec::new();
            below(&tree, n, &mut under);
            for &c in &under {
                assert!(dist(n, c) <= tree.nodes[n].radius, "node {n}, point {c}");
            }
            let node = tree.nodes[n];
            let children = node.first_child as usize..(node.first_child + node.children) as usize;
            for (c, seen) in children.clone().zip(&mut seen[children]) {
                assert!(!*seen, "node {c} twice");
                *seen = true;
                let (lo, hi) = (tree.nodes[c].parent_lo, tree.nodes[c].parent_hi);
                assert!(lo <= dist(n, c) && dist(n, c) <= hi, "node {c} under {n}");
            }
        }
        assert!(seen.iter().all(|&s| s));
        for p in 0..points {
            let rows = tree.rows_of(p);
            assert!(rows.windows(2).all(|w| w[0] < w[1]));
            assert!(rows.iter().all(|&r| corpus.row(r as usize) == corpus.row(rows[0] as usize)));
        }
    }
}
