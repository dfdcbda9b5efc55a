//! The extension module `knng._knng`: numpy arrays in and out of [`knng::Knn`].
//!
//! The Python package `knng` (python/knng/) converts its inputs to C-contiguous float32
//! arrays, which are read here in place, and calls the functions below. Each call runs on a
//! thread of its own while the calling thread, with the GIL released, waits for it and checks
//! for signals, so that Ctrl-C stops a long run through [`knng::Options::interrupt`].
//!
//! A saved index ([`knng::Index`]) is the class `Index` here, which `knng.Index` wraps.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use knng::{Algorithm, Backend, Index, Knn, MatrixRef, Metric, Neighbors, Options, Select};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyKeyboardInterrupt, PyMemoryError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// How often a waiting call looks for signals (Ctrl-C).
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// What a call asks of the engine: equal settings share an open engine, since opening a GPU
/// device and compiling its kernels costs far more than a small graph.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Settings {
    backend: String,
    algorithm: String,
    adapter: Option<String>,
    devices: Vec<String>,
    select: String,
    no_subgroups: bool,
    gpu_memory: Option<u64>,
    max_memory: Option<u64>,
    block_rows: Option<usize>,
    checkpoint: Option<PathBuf>,
    scratch: Option<PathBuf>,
    include_self: bool,
}

impl Settings {
    fn options(&self, interrupt: Arc<AtomicBool>) -> knng::Result<Options> {
        Ok(Options {
            backend: Backend::from_str(&self.backend)?,
            algorithm: Algorithm::from_str(&self.algorithm)?,
            adapter: self.adapter.clone(),
            devices: self.devices.clone(),
            select: Select::from_str(&self.select)?,
            no_subgroups: self.no_subgroups,
            memory_budget: self.gpu_memory,
            max_host_memory: self.max_memory,
            block_rows: self.block_rows,
            checkpoint: self.checkpoint.clone(),
            scratch: self.scratch.clone(),
            include_self: self.include_self,
            interrupt: Some(interrupt),
            ..Options::default()
        })
    }
}

/// An open engine and the flag that stops its runs.
struct Engine {
    knn: Knn,
    interrupt: Arc<AtomicBool>,
}

/// Open engines not in use, by their settings. A call takes one out for its duration (or
/// opens one), so that calls from several Python threads run at once, each on its own engine.
static IDLE: Mutex<Option<HashMap<Settings, Vec<Engine>>>> = Mutex::new(None);

fn take_idle(settings: &Settings) -> Option<Engine> {
    let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
    let engine = idle.get_or_insert_with(HashMap::new).get_mut(settings).and_then(Vec::pop)?;
    // A signal that came as its last run ended set the flag after the run had checked it.
    engine.interrupt.store(false, Ordering::Relaxed);
    Some(engine)
}

fn put_idle(settings: Settings, engine: Engine) {
    let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
    idle.get_or_insert_with(HashMap::new).entry(settings).or_default().push(engine);
}

/// Python's exception for a library error; the message is the library's own (row, column,
/// value and what is accepted).
fn to_py(e: knng::Error) -> PyErr {
    use knng::Error as E;
    let message = e.to_string();
    match e {
        E::InvalidArgument { .. }
        | E::Empty { .. }
        | E::DimensionMismatch { .. }
        | E::NonFinite { .. }
        | E::TooLarge { .. }
        | E::DegenerateRow { .. } => PyValueError::new_err(message),
        E::OutOfMemory(_) | E::HostMemory(_) => PyMemoryError::new_err(message),
        E::File { .. } | E::Io { .. } => PyOSError::new_err(message),
        E::Interrupted => PyKeyboardInterrupt::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// Runs `work` on an engine with `settings`, on a thread of its own, while this thread waits
/// without the GIL and checks for signals. A signal's exception (KeyboardInterrupt from
/// Ctrl-C) stops the run, which ends within one step of its work, and is raised here.
fn run<T: Send>(py: Python<'_>, settings: &Settings, work: impl FnOnce(&Knn) -> knng::Result<T> + Send) -> PyResult<T> {
    let idle = take_idle(settings);
    let interrupt = idle.as_ref().map_or_else(|| Arc::new(AtomicBool::new(false)), |e| e.interrupt.clone());
    let options = settings.options(interrupt.clone()).map_err(to_py)?;
    std::thread::scope(|scope| {
        let (done, finished) = mpsc::channel::<()>();
        // Waited on from the GIL-free closure below, which may only borrow what is `Sync`.
        let finished = Mutex::new(finished);
        let flag = interrupt.clone();
        let worker = std::thread::Builder::new()
            .name("knng-python".into())
            .spawn_scoped(scope, move || {
                let result = (|| {
                    let engine = match idle {
                        Some(engine) => engine,
                        None => Engine { knn: Knn::new(options)?, interrupt: flag },
                    };
                    let answer = work(&engine.knn);
                    // An engine whose run failed may hold a device in a state the next run
                    // should not inherit: only a good one goes back.
                    if answer.is_ok() {
                        put_idle(settings.clone(), engine);
                    }
                    answer
                })();
                let _ = done.send(());
                result
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
        loop {
            let over = py.detach(|| {
                let finished = finished.lock().unwrap_or_else(|e| e.into_inner());
                !matches!(finished.recv_timeout(SIGNAL_POLL), Err(RecvTimeoutError::Timeout))
            });
            if over {
                break;
            }
            if let Err(signal) = py.check_signals() {
                interrupt.store(true, Ordering::Relaxed);
                let _ = py.detach(|| worker.join());
                return Err(signal);
            }
        }
        match py.detach(|| worker.join()) {
            Ok(result) => result.map_err(to_py),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(PyRuntimeError::new_err(format!("knng failed: {what}")))
            }
        }
    })
}

/// A float32 matrix read in place: C-contiguous, two-dimensional.
fn matrix<'a>(array: &'a PyReadonlyArray2<'_, f32>, what: &str) -> PyResult<MatrixRef<'a>> {
    let shape = array.shape();
    let (rows, cols) = (shape[0], shape[1]);
    let values =
        array.as_slice().map_err(|_| PyTypeError::new_err(format!("{what} must be a C-contiguous float32 array")))?;
    MatrixRef::new(values, rows, cols).map_err(to_py)
}

type Answer<'py> = (Bound<'py, PyArray2<i64>>, Bound<'py, PyArray2<f32>>);

/// The answer as numpy arrays (rows x k, k innermost): int64 indices, float32 distances.
fn answer(py: Python<'_>, found: Neighbors) -> PyResult<Answer<'_>> {
    let Neighbors { indices, distances, queries, k, .. } = found;
    let shape = (queries, k);
    let indices: Vec<i64> = indices.into_iter().map(i64::from).collect();
    let bad = |e: numpy::ndarray::ShapeError| PyRuntimeError::new_err(format!("answer of the wrong shape: {e}"));
    let indices = Array2::from_shape_vec(shape, indices).map_err(bad)?.into_pyarray(py);
    let distances = Array2::from_shape_vec(shape, distances).map_err(bad)?.into_pyarray(py);
    Ok((indices, distances))
}

fn metric(name: &str) -> PyResult<Metric> {
    Metric::from_str(name).map_err(to_py)
}

/// The k nearest other rows of every row of `data` (the graph).
#[pyfunction]
#[pyo3(signature = (data, k, metric_name, settings))]
fn graph<'py>(
    py: Python<'py>,
    data: PyReadonlyArray2<'py, f32>,
    k: usize,
    metric_name: &str,
    settings: &Bound<'py, PyDict>,
) -> PyResult<Answer<'py>> {
    let metric = metric(metric_name)?;
    let settings = settings_of(settings)?;
    let data = matrix(&data, "data")?;
    let found = run(py, &settings, |knn| knn.graph(data, k, metric))?;
    answer(py, found)
}

/// The k nearest rows of `corpus` for every row of `queries`.
#[pyfunction]
#[pyo3(signature = (corpus, queries, k, metric_name, settings))]
fn search<'py>(
    py: Python<'py>,
    corpus: PyReadonlyArray2<'py, f32>,
    queries: PyReadonlyArray2<'py, f32>,
    k: usize,
    metric_name: &str,
    settings: &Bound<'py, PyDict>,
) -> PyResult<Answer<'py>> {
    let metric = metric(metric_name)?;
    let settings = settings_of(settings)?;
    let (corpus, queries) = (matrix(&corpus, "corpus")?, matrix(&queries, "queries")?);
    let found = run(py, &settings, |knn| knn.search(corpus, queries, k, metric))?;
    answer(py, found)
}

/// An index of `data` under `metric_name`: what it holds follows the settings' algorithm.
#[pyfunction]
#[pyo3(signature = (data, metric_name, settings))]
fn build_index<'py>(
    py: Python<'py>,
    data: PyReadonlyArray2<'py, f32>,
    metric_name: &str,
    settings: &Bound<'py, PyDict>,
) -> PyResult<PyIndex> {
    let metric = metric(metric_name)?;
    let settings = settings_of(settings)?;
    let data = matrix(&data, "data")?;
    let index = run(py, &settings, |knn| knn.build_index(data, metric))?;
    Ok(PyIndex { index })
}

/// A saved index: a corpus, and a cover tree over it or not.
#[pyclass(frozen, name = "Index", module = "knng._knng")]
struct PyIndex {
    index: Index,
}

#[pymethods]
impl PyIndex {
    /// The index file at `path`, mapped and checked.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<PyIndex> {
        // Its checksums read the whole file: seconds for a large one.
        let index = py.detach(|| Index::load(&path)).map_err(to_py)?;
        Ok(PyIndex { index })
    }

    /// Writes the index to `path`, whole or not at all.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| self.index.save(&path)).map_err(to_py)
    }

    /// The k nearest corpus rows of every row of `queries`, under the index's metric.
    #[pyo3(signature = (queries, k, settings))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        queries: PyReadonlyArray2<'py, f32>,
        k: usize,
        settings: &Bound<'py, PyDict>,
    ) -> PyResult<Answer<'py>> {
        let settings = settings_of(settings)?;
        let queries = matrix(&queries, "queries")?;
        // Borrowed by the searching thread: frozen, the index stays put while the GIL is
        // released, and the caller's reference keeps it alive until `run` returns.
        let index = &self.index;
        let found = run(py, &settings, |knn| knn.search_index(index, queries, k))?;
        answer(py, found)
    }

    #[getter]
    fn metric(&self) -> &'static str {
        self.index.metric().name()
    }

    /// The name `algorithm=` takes: "covertree" or "brute".
    #[getter]
    fn algorithm(&self) -> String {
        match self.index.algorithm() {
            Algorithm::CoverTree => "covertree".to_string(),
            Algorithm::Brute => "brute".to_string(),
            other => other.to_string(),
        }
    }

    #[getter]
    fn shape(&self) -> (usize, usize) {
        self.index.shape()
    }

    #[getter]
    fn points(&self) -> Option<usize> {
        self.index.points()
    }
}

/// What runs the work with `settings`, e.g. `cpu: 8 threads`.
#[pyfunction]
fn engine_description(py: Python<'_>, settings: &Bound<'_, PyDict>) -> PyResult<String> {
    let settings = settings_of(settings)?;
    run(py, &settings, |knn| Ok(knn.description()))
}

/// The GPU adapters wgpu sees: one dict each.
#[pyfunction]
fn adapters(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let found = py.detach(knng::adapters);
    found
        .iter()
        .map(|a| {
            let d = PyDict::new(py);
            d.set_item("index", a.index)?;
            d.set_item("name", &a.info.name)?;
            d.set_item("backend", format!("{:?}", a.info.backend))?;
            d.set_item("device_type", format!("{:?}", a.info.device_type))?;
            d.set_item("driver", format!("{} {}", a.info.driver, a.info.driver_info).trim().to_string())?;
            d.set_item("subgroups", a.subgroups)?;
            d.set_item("features", a.features.clone())?;
            d.set_item("auto", a.auto_choice)?;
            d.set_item("description", a.to_string().trim_end().to_string())?;
            Ok(d)
        })
        .collect()
}

/// Why no hardware GPU was found, where the machine shows a reason (a missing driver or
/// device file), else None.
#[pyfunction]
fn missing_gpu_hint(py: Python<'_>) -> Option<String> {
    py.detach(|| knng::missing_gpu_hint(&knng::adapters()))
}

/// Reads the settings dict the Python layer builds (every key present).
fn settings_of(d: &Bound<'_, PyDict>) -> PyResult<Settings> {
    fn get<'py, T: FromPyObjectOwned<'py>>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<T> {
        match d.get_item(key)? {
            Some(v) => {
                v.extract::<T>().map_err(Into::into).map_err(|e: PyErr| PyTypeError::new_err(format!("{key}: {e}")))
            }
            None => Err(PyTypeError::new_err(format!("settings lack {key:?}"))),
        }
    }
    Ok(Settings {
        backend: get(d, "backend")?,
        algorithm: get(d, "algorithm")?,
        adapter: get(d, "adapter")?,
        devices: get(d, "devices")?,
        select: get(d, "select")?,
        no_subgroups: get(d, "no_subgroups")?,
        gpu_memory: get(d, "gpu_memory")?,
        max_memory: get(d, "max_memory")?,
        block_rows: get(d, "block_rows")?,
        checkpoint: get(d, "checkpoint")?,
        scratch: get(d, "scratch")?,
        include_self: get(d, "include_self")?,
    })
}

#[pymodule]
fn _knng(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(graph, m)?)?;
    m.add_function(wrap_pyfunction!(search, m)?)?;
    m.add_function(wrap_pyfunction!(build_index, m)?)?;
    m.add_class::<PyIndex>()?;
    m.add_function(wrap_pyfunction!(engine_description, m)?)?;
    m.add_function(wrap_pyfunction!(adapters, m)?)?;
    m.add_function(wrap_pyfunction!(missing_gpu_hint, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
