//! The walk, the top layer: one [`Walk`] per tree request reads the registry's
//! applications, selects those the scope names, and walks each from its cache where it has
//! one, the rest live, applying the request's filters as it goes so that a skipped subtree
//! costs no call at all. A node is read in steps ([`Walk::visit_node`]): what it is, whether
//! the filters keep it, its own properties (read while its cached children are walked), then
//! the children not yet walked. Every call goes through [`Walk::call_raw`], which bounds the
//! calls waiting on an application, times them out and marks an application that fails as
//! down for the rest of the walk.

use super::bus::CALL_TIMEOUT;
use super::cache::{AppCache, Core, Ifaces, Obj, WireRef, parse_cache};
use super::names::{
    ACCESSIBLE, ACTION, APPLICATION, CACHE, CACHE_PATH, COMPONENT, PROPERTIES, REGISTRY,
    ROLE_APPLICATION, ROLE_DESKTOP_FRAME, ROOT_PATH, SCREEN_COORDS, STATE_DEFUNCT,
    STATE_MANAGES_DESCENDANTS, STATE_MULTI_LINE, STATE_SHOWING, STATE_VISIBLE, TABLE, TEXT, VALUE,
    bounds, role_name, state_bits, state_names,
};
use futures::future::{BoxFuture, FutureExt as _, join_all};
use pincer_shared::limits::MAX_TREE_NODES;
use pincer_shared::observe::{Rect, TreeRequest, TreeScope};
use pincer_shared::tree::UiNode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::time::timeout;
use zbus::zvariant::{DynamicType, OwnedValue, Type};

/// How long a whole walk may take; nodes not reached by then are left out.
const WALK_DEADLINE: Duration = Duration::from_secs(15);
/// Calls waiting on one application. Applications answer one call at a time, so this only
/// has to keep their queue full; more would just hold replies in socket buffers.
const IN_FLIGHT_PER_APP: usize = 64;
/// Deepest level walked whatever the request says: a buggy app can make its tree a cycle.
/// Below the depth hosts decode.
const MAX_DEPTH: u32 = 256;
const _: () = assert!(MAX_DEPTH <= pincer_shared::limits::MAX_TREE_DEPTH);
/// Longest text taken from one node, in characters.
const MAX_TEXT_CHARS: i32 = 64 * 1024;
/// Above this many children, a node that manages its descendants is not asked to list them:
/// atk-bridge would create an object per child (a spreadsheet has 2^31).
const MAX_LISTED_DESCENDANTS: i32 = 1024;
/// Most on-screen cells taken from one such node.
const MAX_VISIBLE_CELLS: i64 = 4096;

/// Attribute on a node whose application failed during the walk.
pub(super) const ERROR_ATTR: &str = "pincer-error";
/// Attribute on a node whose children are not all listed, saying which are.
pub(super) const NOTE_ATTR: &str = "pincer-note";

/// What the walk knows of a node before reading it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// An application's root.
    App,
    /// Any other node.
    Node,
    /// An on-screen cell of a huge grid.
    Cell(CellHint),
}

impl Kind {
    /// What the walk knows of a grid's cell, for a cell.
    fn cell(self) -> Option<CellHint> {
        match self {
            Self::Cell(hint) => Some(hint),
            Self::App | Self::Node => None,
        }
    }
}

/// What a huge grid's cells share, read once for all of them, and where a cell is.
#[derive(Debug, Clone, Copy)]
struct CellHint {
    /// The interfaces of the grid's first cell.
    ifaces: Ifaces,
    /// The role of the grid's first cell.
    role: Option<u32>,
    /// The cell's box, from its row's and column's extents.
    bounds: Option<Rect>,
}

/// A node's bounds as far as the walk knows them before reading its properties.
#[derive(Debug, Clone, Copy)]
enum Bounds {
    /// Not read yet.
    Unread,
    /// Read, or known from a cell's row and column; `None`: the node has no usable bounds.
    Known(Option<Rect>),
}

/// A node's own properties, as [`Walk::read_own`] reads them.
#[derive(Debug)]
struct Own {
    /// Role, name, description and child count of a node read live.
    about: Option<About>,
    bounds: Option<Rect>,
    /// A cached node's attributes, when the request asks for them.
    attributes: Option<HashMap<String, String>>,
    actions: Vec<String>,
    text: Option<String>,
    value: Option<f64>,
    /// An application's toolkit and its version, as attributes.
    toolkit: Vec<(String, String)>,
}

/// What the live walk reads of a node in its second round.
#[derive(Debug)]
struct About {
    role: u32,
    name: String,
    description: String,
    child_count: Option<i32>,
    /// atk-bridge's `Attributes` property; other bridges only have `GetAttributes`.
    attributes: Option<HashMap<String, String>>,
}

/// An application's cache: what it knows of its objects, by object path.
/// At most `max` characters of `text`.
fn cap_chars(mut text: String, max: i32) -> String {
    let max = usize::try_from(max).unwrap_or(0);
    if let Some((cut, _)) = text.char_indices().nth(max) {
        text.truncate(cut);
    }
    text
}

/// Locks `mutex`; its data stays usable even if a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The process name of `pid`, to name an application that does not answer.
fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim().to_owned()).filter(|c| !c.is_empty())
}

/// A call that brought no usable answer: the object is gone or lacks the interface, or the
/// application or the bus failed, which is then recorded in [`App::down`] or
/// [`Walk::bus_failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NoAnswer;

/// An application (or the registry) being walked.
#[derive(Debug)]
struct App {
    /// Its unique bus name.
    bus: String,
    /// Its process, from the bus.
    pid: Option<u32>,
    /// Its direct connection, when it has one.
    direct: OnceLock<zbus::Connection>,
    /// Bounds the calls waiting on it.
    permits: Semaphore,
    /// Why it stopped being asked, once it has.
    down: OnceLock<String>,
    /// Its cache, once read.
    cache: OnceLock<AppCache>,
    /// Its toolkit and version as attributes, once read (for the filters, or the root's
    /// attributes).
    toolkit: OnceLock<Vec<(String, String)>>,
}

impl App {
    fn new(bus: &str, pid: Option<u32>) -> Self {
        Self {
            bus: bus.to_owned(),
            pid,
            direct: OnceLock::new(),
            permits: Semaphore::new(IN_FLIGHT_PER_APP),
            down: OnceLock::new(),
            cache: OnceLock::new(),
            toolkit: OnceLock::new(),
        }
    }

    /// Whether a node of this application is on screen, as far as its states tell. GTK 4.8
    /// marks only windows `showing` and every widget `visible`, so for GTK 4 `visible`
    /// stands for it.
    fn showing(&self, core: &Core) -> bool {
        core.has(STATE_SHOWING)
            || (self.toolkit.get().is_some_and(|t| is_gtk4(t)) && core.has(STATE_VISIBLE))
    }

    fn cached(&self, obj: &Obj) -> Option<&Core> {
        if obj.bus != self.bus {
            return None;
        }
        self.cache.get()?.get(&obj.path)
    }
}

/// A node's place in the walk's node budget, given back when the node is dropped.
#[derive(Debug)]
struct Slot<'a> {
    walk: &'a Walk,
    held: bool,
}

impl Slot<'_> {
    /// Takes a place unless the node has one; false when the budget is spent.
    fn take(&mut self) -> bool {
        self.held = self.held || self.walk.reserve(1) == 1;
        self.held
    }

    /// The node is in the tree: its place stays taken.
    fn keep(&mut self) {
        self.held = false;
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if self.held {
            self.walk.release();
        }
    }
}

/// One walk: the request's filters and the state shared by all of its concurrent parts.
#[derive(Debug)]
pub(super) struct Walk {
    /// The AT-SPI bus.
    conn: zbus::Connection,
    /// Direct connections to applications, carried over between walks.
    peers: Mutex<HashMap<String, zbus::Connection>>,
    showing_only: bool,
    /// The screen, when nodes off it are dropped.
    visible: Option<Rect>,
    /// The screen, for the desktop's bounds and for finding on-screen cells.
    screen: Option<Rect>,
    max_depth: u32,
    /// Whether to ask for attributes that do not come with other properties.
    attributes: bool,
    use_cache: bool,
    /// Nodes that may still be added (see [`Slot`]).
    budget: AtomicI64,
    truncated: AtomicBool,
    deadline: Instant,
    /// Why the bus itself failed, once it has.
    bus_failed: OnceLock<String>,
}

impl Walk {
    /// A walk for `req` over the AT-SPI bus `conn`, reusing the direct connections `peers`
    /// of earlier walks; `screen` bounds `visible_only` and finds a grid's cells on screen.
    pub(super) fn new(
        conn: zbus::Connection,
        peers: HashMap<String, zbus::Connection>,
        req: &TreeRequest,
        screen: Option<Rect>,
        use_cache: bool,
        started: Instant,
    ) -> Self {
        let max_nodes = req
            .max_nodes
            .unwrap_or(MAX_TREE_NODES)
            .clamp(1, MAX_TREE_NODES);
        Self {
            conn,
            peers: Mutex::new(peers),
            showing_only: req.showing_only,
            visible: if req.visible_only { screen } else { None },
            screen,
            max_depth: req.max_depth.unwrap_or(MAX_DEPTH).min(MAX_DEPTH),
            attributes: req.attributes,
            use_cache,
            budget: AtomicI64::new(i64::from(max_nodes)),
            truncated: AtomicBool::new(false),
            deadline: started + WALK_DEADLINE,
            bus_failed: OnceLock::new(),
        }
    }

    /// Whether the tree lacks nodes it would have had without the request's limits or an
    /// application's failure.
    pub(super) fn truncated(&self) -> bool {
        self.truncated.load(Ordering::Relaxed)
    }

    /// The direct connections to applications, for the next walk.
    pub(super) fn take_peers(&self) -> HashMap<String, zbus::Connection> {
        std::mem::take(&mut *lock(&self.peers))
    }

    fn truncate(&self) {
        self.truncated.store(true, Ordering::Relaxed);
    }

    /// Takes up to `n` node slots and returns how many it got.
    fn reserve(&self, n: usize) -> usize {
        let want = i64::try_from(n).unwrap_or(i64::MAX);
        let mut got = 0;
        let _ = self
            .budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                got = want.min(left.max(0));
                Some(left - got)
            });
        if got < want {
            self.truncate();
        }
        usize::try_from(got).unwrap_or(0)
    }

    fn release(&self) {
        self.budget.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls `method` on `path` at `dest`, on behalf of `app`, and reads the reply as `R`.
    async fn call<R, B>(
        &self,
        app: &App,
        dest: &str,
        path: &str,
        iface: &str,
        method: &str,
        body: &B,
    ) -> Result<R, NoAnswer>
    where
        R: DeserializeOwned + Type,
        B: Serialize + DynamicType + Sync,
    {
        let reply = self.call_raw(app, dest, path, iface, method, body).await?;
        reply.body().deserialize::<R>().map_err(|_| NoAnswer)
    }

    /// Calls `method` on `path` at `dest`, on behalf of `app`.
    async fn call_raw<B>(
        &self,
        app: &App,
        dest: &str,
        path: &str,
        iface: &str,
        method: &str,
        body: &B,
    ) -> Result<zbus::Message, NoAnswer>
    where
        B: Serialize + DynamicType + Sync,
    {
        if app.down.get().is_some() || self.bus_failed.get().is_some() {
            return Err(NoAnswer);
        }
        let Ok(_permit) = app.permits.acquire().await else {
            return Err(NoAnswer);
        };
        if app.down.get().is_some() || self.bus_failed.get().is_some() {
            return Err(NoAnswer);
        }
        // Only the application's own objects go over its direct connection.
        let direct = app.direct.get().filter(|_| dest == app.bus);
        let call = match direct {
            Some(peer) => peer.call_method(None::<&str>, path, Some(iface), method, body),
            None => self
                .conn
                .call_method(Some(dest), path, Some(iface), method, body),
        };
        match timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(zbus::Error::MethodError(name, _, _))) => match name.as_str() {
                "org.freedesktop.DBus.Error.ServiceUnknown"
                | "org.freedesktop.DBus.Error.NameHasNoOwner" => {
                    let _ = app.down.set("the application left the bus".into());
                    Err(NoAnswer)
                }
                "org.freedesktop.DBus.Error.NoReply" => {
                    let _ = app.down.set("the application did not reply".into());
                    Err(NoAnswer)
                }
                _ => Err(NoAnswer),
            },
            Ok(Err(
                e @ (zbus::Error::InputOutput(_)
                | zbus::Error::Connection(..)
                | zbus::Error::Handshake(_)),
            )) => {
                if direct.is_some() {
                    lock(&self.peers).remove(&app.bus);
                    let _ = app
                        .down
                        .set(format!("the application's connection failed: {e}"));
                } else {
                    let _ = self.bus_failed.set(e.to_string());
                }
                Err(NoAnswer)
            }
            Ok(Err(_)) => Err(NoAnswer),
            Err(_) => {
                let _ = app.down.set(format!(
                    "the application did not answer within {} ms; its subtree is left out",
                    CALL_TIMEOUT.as_millis()
                ));
                Err(NoAnswer)
            }
        }
    }

    /// Calls a method of the object itself.
    async fn on<R, B>(
        &self,
        app: &App,
        obj: &Obj,
        iface: &str,
        method: &str,
        body: &B,
    ) -> Result<R, NoAnswer>
    where
        R: DeserializeOwned + Type,
        B: Serialize + DynamicType + Sync,
    {
        self.call(app, &obj.bus, &obj.path, iface, method, body)
            .await
    }

    async fn property<T: TryFrom<OwnedValue>>(
        &self,
        app: &App,
        obj: &Obj,
        iface: &str,
        name: &str,
    ) -> Option<T> {
        let value: OwnedValue = self
            .on(app, obj, PROPERTIES, "Get", &(iface, name))
            .await
            .ok()?;
        T::try_from(value).ok()
    }

    /// The whole tree for `scope`; `Err` only when the bus or the registry failed.
    pub(super) async fn run(
        self: Arc<Self>,
        scope: &TreeScope,
        active_pid: Option<u32>,
    ) -> Result<UiNode, String> {
        let registry = App::new(REGISTRY, None);
        let desktop = Obj::new(REGISTRY, ROOT_PATH);
        let (apps, desktop_name) = futures::join!(
            self.on::<Vec<WireRef>, _>(&registry, &desktop, ACCESSIBLE, "GetChildren", &()),
            self.property::<String>(&registry, &desktop, ACCESSIBLE, "Name"),
        );
        let apps = match apps {
            Ok(apps) => apps,
            Err(_) => {
                let why = self
                    .bus_failed
                    .get()
                    .or(registry.down.get())
                    .cloned()
                    .unwrap_or_else(|| "the registry refused to list applications".into());
                return Err(format!("AT-SPI registry: {why}"));
            }
        };
        let roots: Vec<Obj> = apps.into_iter().filter_map(Obj::from_wire).collect();
        lock(&self.peers).retain(|bus, _| roots.iter().any(|root| root.bus == *bus));
        let pids = join_all(roots.iter().map(|root| async {
            let name = (root.bus.as_str(),);
            self.call::<u32, _>(
                &registry,
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "GetConnectionUnixProcessID",
                &name,
            )
            .await
        }))
        .await;
        let apps: Vec<(Obj, Arc<App>)> = roots
            .into_iter()
            .zip(pids)
            .map(|(root, pid)| {
                let app = Arc::new(App::new(&root.bus, pid.ok()));
                (root, app)
            })
            .collect();

        let (selected, miss) = self.select(apps, scope, active_pid).await;
        if let Some(why) = self.bus_failed.get() {
            return Err(why.clone());
        }

        let as_root = selected.len() == 1 && !matches!(scope, TreeScope::Desktop);
        let depth = u32::from(!as_root);
        if !as_root {
            self.reserve(1);
        }
        let taken = if depth > self.max_depth {
            if !selected.is_empty() {
                self.truncate();
            }
            0
        } else {
            self.reserve(selected.len())
        };
        let nodes = join_all(
            selected
                .iter()
                .take(taken)
                .map(|(root, app)| self.clone().visit_app(root.clone(), app.clone(), depth)),
        )
        .await;
        if let Some(why) = self.bus_failed.get() {
            return Err(why.clone());
        }
        let mut nodes = nodes.into_iter();
        match (as_root, nodes.next()) {
            (true, Some(node)) => Ok(node),
            (_, first) => {
                let mut attributes = BTreeMap::new();
                if let Some(miss) = miss {
                    attributes.insert(NOTE_ATTR.to_owned(), miss);
                }
                Ok(UiNode {
                    role: role_name(ROLE_DESKTOP_FRAME),
                    name: desktop_name.unwrap_or_default(),
                    bounds: self.screen,
                    attributes,
                    children: first.into_iter().chain(nodes).collect(),
                    ..Default::default()
                })
            }
        }
    }

    /// The applications `scope` selects, and a note when it selects none.
    async fn select(
        &self,
        apps: Vec<(Obj, Arc<App>)>,
        scope: &TreeScope,
        active_pid: Option<u32>,
    ) -> (Vec<(Obj, Arc<App>)>, Option<String>) {
        let selected: Vec<_> = match scope {
            TreeScope::Desktop => return (apps, None),
            TreeScope::ActiveApp => {
                let Some(pid) = active_pid else {
                    return (Vec::new(), Some("no active window".into()));
                };
                apps.into_iter()
                    .filter(|(_, app)| app.pid == Some(pid))
                    .take(1)
                    .collect()
            }
            TreeScope::App(pattern) => {
                let pattern = pattern.to_lowercase();
                let names = join_all(apps.iter().map(|(root, app)| async move {
                    let name = self.property::<String>(app, root, ACCESSIBLE, "Name").await;
                    name.filter(|n| !n.is_empty())
                        .or_else(|| app.pid.and_then(process_name))
                }))
                .await;
                apps.into_iter()
                    .zip(names)
                    .filter(|(_, name)| {
                        name.as_ref()
                            .is_some_and(|n| n.to_lowercase().contains(&pattern))
                    })
                    .map(|(app, _)| app)
                    .collect()
            }
        };
        let miss = selected.is_empty().then(|| match scope {
            TreeScope::ActiveApp => format!(
                "the active window's process ({}) has no accessible application",
                active_pid.unwrap_or_default()
            ),
            _ => "no accessible application matches the scope".into(),
        });
        (selected, miss)
    }

    /// An application's subtree, from its cache where it has one.
    async fn visit_app(self: Arc<Self>, root: Obj, app: Arc<App>, depth: u32) -> UiNode {
        if let Some(peer) = self.peer(&app, &root).await {
            let _ = app.direct.set(peer);
        }
        let filters = self.showing_only || self.visible.is_some();
        let (items, toolkit) = futures::join!(
            async {
                match self.use_cache {
                    true => self
                        .call_raw(&app, &app.bus, CACHE_PATH, CACHE, "GetItems", &())
                        .await
                        .ok(),
                    false => None,
                }
            },
            async {
                match filters {
                    true => self.toolkit(&app, &root).await,
                    false => Vec::new(),
                }
            }
        );
        if let Some(cache) = items.and_then(|r| parse_cache(&app.bus, &r)) {
            let _ = app.cache.set(cache);
        }
        if filters {
            let _ = app.toolkit.set(toolkit);
        }
        let mut node = self
            .visit(&app, root, depth, Kind::App, true)
            .await
            .unwrap_or_else(|| UiNode {
                role: role_name(ROLE_APPLICATION),
                name: app
                    .pid
                    .and_then(process_name)
                    .unwrap_or_else(|| app.bus.clone()),
                ..Default::default()
            });
        if let Some(pid) = app.pid {
            node.attributes.insert("pid".into(), pid.to_string());
        }
        if let Some(why) = app.down.get() {
            node.attributes.insert(ERROR_ATTR.into(), why.clone());
            self.truncate();
        }
        node
    }

    /// The application's direct connection: the one from an earlier walk, or a new one to
    /// the socket its bridge names.
    async fn peer(&self, app: &App, root: &Obj) -> Option<zbus::Connection> {
        if let Some(peer) = lock(&self.peers).get(&app.bus) {
            return Some(peer.clone());
        }
        let address: String = self
            .on(app, root, APPLICATION, "GetApplicationBusAddress", &())
            .await
            .ok()?;
        // Applications choose the address: only local sockets are dialled.
        if !address.starts_with("unix:") {
            return None;
        }
        let open = async {
            zbus::connection::Builder::address(address.as_str())?
                .p2p()
                .build()
                .await
        };
        let peer = timeout(CALL_TIMEOUT, open).await.ok()?.ok()?;
        lock(&self.peers).insert(app.bus.clone(), peer.clone());
        Some(peer)
    }

    /// A node and its subtree, or `None` when it is filtered out or gone. `reserved`: it
    /// already holds a slot of the node budget.
    fn visit(
        self: &Arc<Self>,
        app: &Arc<App>,
        obj: Obj,
        depth: u32,
        kind: Kind,
        reserved: bool,
    ) -> BoxFuture<'static, Option<UiNode>> {
        let (walk, app) = (self.clone(), app.clone());
        async move {
            let mut slot = Slot {
                walk: &walk,
                held: reserved,
            };
            walk.visit_node(&app, obj, depth, kind, &mut slot).await
        }
        .boxed()
    }

    /// A node and its subtree, in steps: what it is ([`Self::identify`]), whether the
    /// filters keep it ([`Self::kept`]) and its place in the node budget, its own properties
    /// ([`Self::read_own`]) while the children its cache lists are walked, then the children
    /// found otherwise.
    async fn visit_node(
        self: &Arc<Self>,
        app: &Arc<App>,
        obj: Obj,
        depth: u32,
        kind: Kind,
        slot: &mut Slot<'_>,
    ) -> Option<UiNode> {
        if Instant::now() >= self.deadline {
            self.truncate();
            return None;
        }
        let (mut core, live) = self.identify(app, &obj, kind).await?;
        let bounds = self.kept(app, &obj, &core, kind).await?;
        if !slot.take() {
            return None;
        }
        // Children the cache already lists are walked while this node's own properties are
        // read, not after: a level of the tree then costs one round trip, not two, which
        // matters most when the application is busy drawing between calls.
        let listed = self.cached_kids(app, &core, depth);
        let (own, listed) =
            futures::join!(self.read_own(app, &obj, &core, kind, bounds, live), async {
                match listed {
                    Some(visits) => Some(visits.await),
                    None => None,
                }
            },);
        let attributes = match own.about {
            Some(about) => self.take_about(app, &obj, &mut core, about).await,
            // The object went away between the calls.
            None if live => return None,
            None => own.attributes,
        };
        let mut attributes: BTreeMap<String, String> =
            attributes.unwrap_or_default().into_iter().collect();
        attributes.extend(own.toolkit);
        let children = match listed {
            Some(children) => children,
            None => {
                let (kids, note) = self.children(app, &obj, &core, own.bounds, depth).await;
                if let Some(note) = note {
                    attributes.insert(NOTE_ATTR.into(), note);
                }
                self.visit_kids(app, kids, depth).await
            }
        };
        slot.keep();
        Some(UiNode {
            role: role_name(core.role),
            name: core.name,
            description: core.description,
            text: own.text,
            value: own.value,
            states: state_names(core.states),
            bounds: own.bounds,
            actions: own.actions,
            attributes,
            children,
        })
    }

    /// What a node is: its application's cached core, else its states and interfaces read
    /// live (a grid's cell takes the interfaces of its column's first cell), the rest of a
    /// live core coming with its properties. `None` when it is gone; the flag is true when
    /// it was read live.
    async fn identify(&self, app: &App, obj: &Obj, kind: Kind) -> Option<(Core, bool)> {
        if let Some(core) = app.cached(obj) {
            return Some((core.clone(), false));
        }
        let core = match kind {
            Kind::Cell(hint) => Core {
                states: state_bits(
                    &self
                        .on::<Vec<u32>, _>(app, obj, ACCESSIBLE, "GetState", &())
                        .await
                        .ok()?,
                ),
                ifaces: hint.ifaces,
                ..Default::default()
            },
            Kind::App | Kind::Node => {
                let (states, ifaces) = futures::join!(
                    self.on::<Vec<u32>, _>(app, obj, ACCESSIBLE, "GetState", &()),
                    self.on::<Vec<String>, _>(app, obj, ACCESSIBLE, "GetInterfaces", &()),
                );
                Core {
                    states: state_bits(&states.ok()?),
                    ifaces: Ifaces::parse(&ifaces.unwrap_or_default()),
                    ..Default::default()
                }
            }
        };
        Some((core, true))
    }

    /// Whether the filters keep a node: `None` when they drop it, else its bounds as far as
    /// they are known by now (read for `visible_only`, or a cell's from its row and column),
    /// so that they are not asked for twice.
    async fn kept(&self, app: &App, obj: &Obj, core: &Core, kind: Kind) -> Option<Bounds> {
        let is_app = matches!(kind, Kind::App);
        if self.drops(app, core, is_app) {
            return None;
        }
        let known = match kind.cell().and_then(|hint| hint.bounds) {
            Some(rect) => Bounds::Known(Some(rect)),
            None => Bounds::Unread,
        };
        let Some(screen) = self.visible.filter(|_| !is_app && core.ifaces.component) else {
            return Some(known);
        };
        let rect = match known {
            Bounds::Known(rect) => rect,
            Bounds::Unread => self.extents(app, obj).await,
        };
        // A showing node without usable bounds is kept (GTK's current notebook page reports
        // bogus extents, yet its children are on screen); one that is not showing is hidden.
        let off_screen = match rect {
            Some(r) => r.intersect(&screen).is_none(),
            None => !app.showing(core),
        };
        (!off_screen).then_some(Bounds::Known(rect))
    }

    /// The visits of the children a node's cache lists, started now; `None` when its
    /// children have to be found otherwise (none listed, too deep, or a node that manages
    /// its descendants).
    fn cached_kids(
        self: &Arc<Self>,
        app: &Arc<App>,
        core: &Core,
        depth: u32,
    ) -> Option<impl Future<Output = Vec<UiNode>> + use<>> {
        match &core.children {
            Some(children) if depth < self.max_depth && !core.has(STATE_MANAGES_DESCENDANTS) => {
                Some(self.visit_kids(
                    app,
                    children.iter().map(|c| (c.clone(), Kind::Node)).collect(),
                    depth,
                ))
            }
            _ => None,
        }
    }

    /// A node's own properties, asked for all at once: role, name, description and child
    /// count only for a node read live (a cached one has them), bounds unless known, and the
    /// attributes, actions, text, value and toolkit that its interfaces and the request call
    /// for.
    async fn read_own(
        &self,
        app: &App,
        obj: &Obj,
        core: &Core,
        kind: Kind,
        bounds: Bounds,
        live: bool,
    ) -> Own {
        let ifaces = core.ifaces;
        let cell = kind.cell();
        let (about, bounds, attributes, actions, text, value, toolkit) = futures::join!(
            async {
                if live {
                    self.live_core(app, obj, cell.and_then(|h| h.role)).await
                } else {
                    None
                }
            },
            async {
                match bounds {
                    Bounds::Known(rect) => rect,
                    Bounds::Unread if ifaces.component => self.extents(app, obj).await,
                    Bounds::Unread => None,
                }
            },
            async {
                if live || !self.attributes {
                    None
                } else {
                    self.attributes(app, obj).await
                }
            },
            async {
                if ifaces.action {
                    self.actions(app, obj).await
                } else {
                    Vec::new()
                }
            },
            async {
                if ifaces.text {
                    // A cell's text is bounded by its application: no need to ask its length
                    // first, whatever its multi-line state says.
                    self.text(app, obj, core.has(STATE_MULTI_LINE) && cell.is_none())
                        .await
                } else {
                    None
                }
            },
            async {
                if ifaces.value {
                    self.property::<f64>(app, obj, VALUE, "CurrentValue")
                        .await
                        .filter(|v| v.is_finite())
                } else {
                    None
                }
            },
            async {
                if matches!(kind, Kind::App) && ifaces.application && self.attributes {
                    match app.toolkit.get() {
                        Some(known) => known.clone(),
                        None => self.toolkit(app, obj).await,
                    }
                } else {
                    Vec::new()
                }
            },
        );
        Own {
            about,
            bounds,
            attributes,
            actions,
            text,
            value,
            toolkit,
        }
    }

    /// Completes a live node's core with what its second round read, and gives its
    /// attributes: atk-bridge's came with the other properties, other bridges' are asked for.
    async fn take_about(
        &self,
        app: &App,
        obj: &Obj,
        core: &mut Core,
        about: About,
    ) -> Option<HashMap<String, String>> {
        core.role = about.role;
        core.name = about.name;
        core.description = about.description;
        core.child_count = about.child_count;
        match about.attributes {
            Some(attributes) => Some(attributes),
            // Bridges other than atk-bridge have no `Attributes` property.
            None if self.attributes => self.attributes(app, obj).await,
            None => None,
        }
    }

    /// Walks a node's children (at `depth + 1`), in order, concurrently.
    fn visit_kids(
        self: &Arc<Self>,
        app: &Arc<App>,
        kids: Vec<(Obj, Kind)>,
        depth: u32,
    ) -> impl Future<Output = Vec<UiNode>> + use<> {
        let mut visits = Vec::with_capacity(kids.len());
        for (kid, kind) in kids {
            // A cached child's states are known: filtered out, it costs no slot and no call;
            // kept, it takes its slot now, so that a spent budget cuts the last children. A
            // live child takes one once its states show that it stays.
            let reserved = match app.cached(&kid) {
                Some(core) if self.drops(app, core, false) => continue,
                Some(_) if self.reserve(1) == 0 => break,
                Some(_) => true,
                None if self.budget.load(Ordering::Relaxed) <= 0 => {
                    self.truncate();
                    break;
                }
                None => false,
            };
            visits.push(self.visit(app, kid, depth + 1, kind, reserved));
        }
        async move { join_all(visits).await.into_iter().flatten().collect() }
    }

    /// Whether the filters drop a node (application nodes have neither states nor bounds).
    fn drops(&self, app: &App, core: &Core, is_app: bool) -> bool {
        core.has(STATE_DEFUNCT) || (self.showing_only && !is_app && !app.showing(core))
    }

    /// Role, name, description, child count and attributes, read live: the `Accessible`
    /// properties come in one `GetAll`.
    /// The role is not asked for when it is known (`role`).
    async fn live_core(&self, app: &App, obj: &Obj, role: Option<u32>) -> Option<About> {
        let (role, props) = futures::join!(
            async {
                match role {
                    Some(role) => Ok(role),
                    None => {
                        self.on::<u32, _>(app, obj, ACCESSIBLE, "GetRole", &())
                            .await
                    }
                }
            },
            self.on::<HashMap<String, OwnedValue>, _>(
                app,
                obj,
                PROPERTIES,
                "GetAll",
                &(ACCESSIBLE,)
            ),
        );
        let mut props = props.ok()?;
        let mut take = |key: &str| props.remove(key);
        let text =
            |v: Option<OwnedValue>| v.and_then(|v| String::try_from(v).ok()).unwrap_or_default();
        Some(About {
            role: role.ok()?,
            name: text(take("Name")),
            description: text(take("Description")),
            child_count: take("ChildCount").and_then(|v| i32::try_from(v).ok()),
            attributes: take("Attributes").and_then(|v| HashMap::try_from(v).ok()),
        })
    }

    async fn attributes(&self, app: &App, obj: &Obj) -> Option<HashMap<String, String>> {
        self.on(app, obj, ACCESSIBLE, "GetAttributes", &())
            .await
            .ok()
    }

    /// An application's toolkit and its version, as attributes (`toolkit`,
    /// `toolkit-version`).
    async fn toolkit(&self, app: &App, obj: &Obj) -> Vec<(String, String)> {
        let (name, version) = futures::join!(
            self.property::<String>(app, obj, APPLICATION, "ToolkitName"),
            self.property::<String>(app, obj, APPLICATION, "Version"),
        );
        [("toolkit", name), ("toolkit-version", version)]
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_owned(), value?)))
            .collect()
    }

    async fn extents(&self, app: &App, obj: &Obj) -> Option<Rect> {
        let rect = self
            .on::<(i32, i32, i32, i32), _>(app, obj, COMPONENT, "GetExtents", &(SCREEN_COORDS,))
            .await
            .ok()?;
        bounds(rect)
    }

    /// The node's action names. `GetActions` gives localized names, so the names come from
    /// `GetName`; the first is asked for alongside, as most nodes have just one action.
    async fn actions(&self, app: &App, obj: &Obj) -> Vec<String> {
        let (all, first) = futures::join!(
            self.on::<Vec<(String, String, String)>, _>(app, obj, ACTION, "GetActions", &()),
            self.on::<String, _>(app, obj, ACTION, "GetName", &(0i32,)),
        );
        let count = all.map_or(0, |all| all.len());
        let Ok(first) = first else {
            return Vec::new();
        };
        let rest = join_all((1..count).map(|i| async move {
            let index = (i32::try_from(i).unwrap_or(i32::MAX),);
            self.on::<String, _>(app, obj, ACTION, "GetName", &index)
                .await
        }))
        .await;
        std::iter::once(first)
            .chain(rest.into_iter().flatten())
            .filter(|name| !name.is_empty())
            .collect()
    }

    /// The node's text. Multi-line texts can be whole documents: their length is asked first
    /// so that no more than the cap crosses the bus; others are read to their end (-1).
    async fn text(&self, app: &App, obj: &Obj, multi_line: bool) -> Option<String> {
        let end = if multi_line {
            let count: i32 = self.property(app, obj, TEXT, "CharacterCount").await?;
            if count <= 0 {
                return Some(String::new());
            }
            count.min(MAX_TEXT_CHARS)
        } else {
            -1
        };
        let text: String = self
            .on(app, obj, TEXT, "GetText", &(0i32, end))
            .await
            .ok()?;
        Some(cap_chars(text, MAX_TEXT_CHARS))
    }

    /// The children to visit, with what is known of them, and a note when they are not all
    /// of them.
    async fn children(
        &self,
        app: &App,
        obj: &Obj,
        core: &Core,
        rect: Option<Rect>,
        depth: u32,
    ) -> (Vec<(Obj, Kind)>, Option<String>) {
        let mut count = core.child_count;
        if depth >= self.max_depth {
            if count.unwrap_or(1) > 0 {
                self.truncate();
            }
            return (Vec::new(), None);
        }
        if core.has(STATE_MANAGES_DESCENDANTS) {
            if count.is_none() {
                count = self.property(app, obj, ACCESSIBLE, "ChildCount").await;
            }
            // Calc's grid says 2^31-1 (its 2^34 cells overflow the count); a negative or
            // missing count is no safer to enumerate.
            let count = count.unwrap_or(-1);
            if !(0..=MAX_LISTED_DESCENDANTS).contains(&count) {
                return self.visible_cells(app, obj, core, rect, count).await;
            }
        }
        if let Some(children) = &core.children {
            return (
                children.iter().map(|c| (c.clone(), Kind::Node)).collect(),
                None,
            );
        }
        if count == Some(0) {
            return (Vec::new(), None);
        }
        let children: Vec<WireRef> = self
            .on(app, obj, ACCESSIBLE, "GetChildren", &())
            .await
            .unwrap_or_default();
        (
            children
                .into_iter()
                .filter_map(Obj::from_wire)
                .map(|c| (c, Kind::Node))
                .collect(),
            None,
        )
    }

    /// The cells of a huge table that are on screen: the cells at its visible corners give
    /// the row and column range, and each cell in it is asked for by position.
    async fn visible_cells(
        &self,
        app: &App,
        table: &Obj,
        core: &Core,
        rect: Option<Rect>,
        count: i32,
    ) -> (Vec<(Obj, Kind)>, Option<String>) {
        let unlisted = || {
            self.truncate();
            (
                Vec::new(),
                Some(format!(
                    "children not listed: the object manages {count} descendants"
                )),
            )
        };
        if !(core.ifaces.table && core.ifaces.component) {
            return unlisted();
        }
        let Some(area) = rect.and_then(|r| match self.screen {
            Some(screen) => r.intersect(&screen),
            None => Some(r),
        }) else {
            return unlisted();
        };
        let right = area
            .x
            .saturating_add(i32::try_from(area.width).unwrap_or(i32::MAX) - 1);
        let bottom = area
            .y
            .saturating_add(i32::try_from(area.height).unwrap_or(i32::MAX) - 1);
        let (first, last) = futures::join!(
            self.cell_position(app, table, area.x, area.y),
            self.cell_position(app, table, right, bottom),
        );
        let (Some((row0, col0)), Some((row1, col1))) = (first, last) else {
            return unlisted();
        };
        if row1 < row0 || col1 < col0 {
            return unlisted();
        }
        // The corners come from the application: a range it made up must not become
        // millions of calls.
        let clamp = |first: i32, last: i32, most: i64| {
            i32::try_from(i64::from(last).min(i64::from(first) + most - 1)).unwrap_or(last)
        };
        let col1 = clamp(col0, col1, MAX_VISIBLE_CELLS);
        let cols = i64::from(col1) - i64::from(col0) + 1;
        let row1 = clamp(row0, row1, (MAX_VISIBLE_CELLS / cols).max(1));
        let mut positions: Vec<(i32, i32)> = (row0..=row1)
            .flat_map(|row| (col0..=col1).map(move |col| (row, col)))
            .collect();
        // Cells beyond the node budget are not even asked for.
        let room = usize::try_from(self.budget.load(Ordering::Relaxed)).unwrap_or(0);
        if positions.len() > room {
            positions.truncate(room);
            self.truncate();
        }
        let cells: Vec<Option<Obj>> = join_all(
            positions
                .iter()
                .map(|pos| self.on::<WireRef, _>(app, table, TABLE, "GetAccessibleAt", pos)),
        )
        .await
        .into_iter()
        .map(|cell| cell.ok().and_then(Obj::from_wire))
        .collect();
        let found = cells.iter().flatten().count();
        let note = format!(
            "only the {found} cells on screen (rows {row0}-{row1}, columns {col0}-{col1}) of {count}"
        );
        // A grid's cells are objects of a few classes, one per column: the first visible
        // row's cell stands for its column's interfaces and role (a cell lacking one of
        // those interfaces just leaves that field empty, as its call fails). And cells are
        // where their rows and columns are: the extents of the first and last visible rows
        // place the columns, those of the first and last visible columns place the rows.
        // Where the two disagree (a merged cell), the cells of that column or row are
        // measured one by one. That leaves about four calls a cell instead of nine.
        let width = usize::try_from(col1 - col0 + 1).unwrap_or(1);
        let height = cells.len().div_ceil(width);
        let at = |row: usize, col: usize| cells.get(row * width + col).cloned().flatten();
        let place = |cell: Option<Obj>| async move {
            match cell {
                Some(c) => self.extents(app, &c).await,
                None => None,
            }
        };
        let kind = |cell: Option<Obj>| async move {
            let cell = cell?;
            let (ifaces, role) = futures::join!(
                self.on::<Vec<String>, _>(app, &cell, ACCESSIBLE, "GetInterfaces", &()),
                self.on::<u32, _>(app, &cell, ACCESSIBLE, "GetRole", &()),
            );
            Some((Ifaces::parse(&ifaces.ok()?), role.ok()))
        };
        let last_row = height.saturating_sub(1);
        let (kinds, top, bottom, left, right) = futures::join!(
            join_all((0..width).map(|c| kind(at(0, c)))),
            join_all((0..width).map(|c| place(at(0, c)))),
            join_all((0..width).map(|c| place(at(last_row, c)))),
            join_all((0..height).map(|r| place(at(r, 0)))),
            join_all((0..height).map(|r| place(at(r, width - 1)))),
        );
        let agree = |a: Option<Rect>, b: Option<Rect>, same: fn(Rect, Rect) -> bool| match (a, b) {
            (Some(a), Some(b)) if same(a, b) => Some(a),
            _ => None,
        };
        let columns: Vec<Option<Rect>> = top
            .into_iter()
            .zip(bottom)
            .map(|(a, b)| agree(a, b, |a, b| a.x == b.x && a.width == b.width))
            .collect();
        let rows: Vec<Option<Rect>> = left
            .into_iter()
            .zip(right)
            .map(|(a, b)| agree(a, b, |a, b| a.y == b.y && a.height == b.height))
            .collect();
        let kids = cells
            .into_iter()
            .enumerate()
            .filter_map(|(i, cell)| {
                let (row, col) = (i / width, i % width);
                let kind = match kinds.get(col).copied().flatten() {
                    Some((ifaces, role)) => Kind::Cell(CellHint {
                        ifaces,
                        role,
                        bounds: match (columns[col], rows.get(row).copied().flatten()) {
                            (Some(c), Some(r)) => Some(Rect::new(c.x, r.y, c.width, r.height)),
                            _ => None,
                        },
                    }),
                    None => Kind::Node,
                };
                Some((cell?, kind))
            })
            .collect();
        (kids, Some(note))
    }

    /// Row and column of the table cell at a screen point.
    async fn cell_position(&self, app: &App, table: &Obj, x: i32, y: i32) -> Option<(i32, i32)> {
        let cell: WireRef = self
            .on(
                app,
                table,
                COMPONENT,
                "GetAccessibleAtPoint",
                &(x, y, SCREEN_COORDS),
            )
            .await
            .ok()?;
        let cell = Obj::from_wire(cell)?;
        let index: i32 = self
            .on(app, &cell, ACCESSIBLE, "GetIndexInParent", &())
            .await
            .ok()?;
        let index = (index,);
        let (row, col) = futures::join!(
            self.on::<i32, _>(app, table, TABLE, "GetRowAtIndex", &index),
            self.on::<i32, _>(app, table, TABLE, "GetColumnAtIndex", &index),
        );
        Some((row.ok()?, col.ok()?)).filter(|(r, c)| *r >= 0 && *c >= 0)
    }
}

/// Whether an application's toolkit attributes name GTK 4.
fn is_gtk4(toolkit: &[(String, String)]) -> bool {
    let value = |key: &str| {
        toolkit
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    value("toolkit") == Some("GTK") && value("toolkit-version").is_some_and(|v| v.starts_with("4."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_capped_on_character_boundaries() {
        assert_eq!(cap_chars("héllo".into(), 2), "hé");
        assert_eq!(cap_chars("héllo".into(), 10), "héllo");
        assert_eq!(cap_chars("abc".into(), 0), "");
    }
}
