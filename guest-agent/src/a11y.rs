//! The accessibility tree of the guest's desktop, read over AT-SPI: [`A11y::tree`] walks the
//! registry's desktop and its applications into a [`UiTree`], applying the request's scope
//! and filters during the walk so that a skipped subtree costs no D-Bus call at all.
//!
//! AT-SPI costs one D-Bus round trip per property, about 1.6 ms each when taken one after
//! another, so the walk is concurrent: a node's calls are issued together, its children are
//! walked together (and kept in order), and at most [`IN_FLIGHT_PER_APP`] calls wait on one
//! application at a time. Calls go straight to each application over the peer-to-peer socket
//! its bridge offers, not through the bus daemon, which would otherwise relay every call and
//! reply. Where an application's bridge serves `org.a11y.atspi.Cache` (GTK's atk-bridge does
//! once an assistive client has registered for an event, which [`A11y`] does when it
//! connects), one `GetItems` call gives role, name, states and structure of every cached
//! object, and only bounds, text, values, actions and attributes are fetched per node. Objects
//! the cache lacks (transient table cells, children added without a signal) are read live; a
//! cached child list that does not add up to the parent's child count is re-read live.
//!
//! Applications are untrusted: they return garbage, vanish mid-walk or hang. Every call has
//! a timeout; an application that misses one is skipped for the rest of the walk and its node
//! says so in a `pincer-error` attribute; the whole walk has a deadline; nodes that manage
//! millions of descendants (a spreadsheet's grid) contribute only the cells on screen.

use futures::future::{BoxFuture, FutureExt as _, join_all};
use pincer_guest_core::platform::Accessibility;
use pincer_shared::WireError;
use pincer_shared::limits::MAX_TREE_NODES;
use pincer_shared::observe::{Rect, TreeRequest, TreeScope};
use pincer_shared::tree::{UiNode, UiTree};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::time::timeout;
use zbus::zvariant::{DynamicType, OwnedObjectPath, OwnedValue, Type};

/// How long one call may take before its application counts as hung for the rest of the walk.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a whole walk may take; nodes not reached by then are left out.
const WALK_DEADLINE: Duration = Duration::from_secs(15);
/// How long finding and connecting to the AT-SPI bus may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
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
const ERROR_ATTR: &str = "pincer-error";
/// Attribute on a node whose children are not all listed, saying which are.
const NOTE_ATTR: &str = "pincer-note";

const REGISTRY: &str = "org.a11y.atspi.Registry";
const ROOT_PATH: &str = "/org/a11y/atspi/accessible/root";
const NULL_PATH: &str = "/org/a11y/atspi/null";
const CACHE_PATH: &str = "/org/a11y/atspi/cache";
const CACHE: &str = "org.a11y.atspi.Cache";
const ACCESSIBLE: &str = "org.a11y.atspi.Accessible";
const APPLICATION: &str = "org.a11y.atspi.Application";
const ACTION: &str = "org.a11y.atspi.Action";
const COMPONENT: &str = "org.a11y.atspi.Component";
const TABLE: &str = "org.a11y.atspi.Table";
const TEXT: &str = "org.a11y.atspi.Text";
const VALUE: &str = "org.a11y.atspi.Value";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
/// An event nobody emits: registering for it makes every atk-bridge activate (and build its
/// cache) without making applications send signals.
const ACTIVATION_EVENT: &str = "window:desktop-create";

/// Coordinates relative to the screen, for `GetExtents` and `GetAccessibleAtPoint`.
const SCREEN_COORDS: u32 = 0;

// AT-SPI role numbers.
const ROLE_DESKTOP_FRAME: u32 = 14;
const ROLE_APPLICATION: u32 = 75;

// AT-SPI state numbers (bits of the `au` state set).
const STATE_DEFUNCT: u32 = 6;
const STATE_MULTI_LINE: u32 = 17;
const STATE_SHOWING: u32 = 25;
const STATE_MANAGES_DESCENDANTS: u32 = 31;

/// Role names by AT-SPI role number, as libatspi and ATK spell them.
#[rustfmt::skip]
const ROLE_NAMES: [&str; 130] = [
    "invalid", "accelerator label", "alert", "animation", "arrow", "calendar", "canvas",
    "check box", "check menu item", "color chooser", "column header", "combo box",
    "date editor", "desktop icon", "desktop frame", "dial", "dialog", "directory pane",
    "drawing area", "file chooser", "filler", "focus traversable", "font chooser", "frame",
    "glass pane", "html container", "icon", "image", "internal frame", "label", "layered pane",
    "list", "list item", "menu", "menu bar", "menu item", "option pane", "page tab",
    "page tab list", "panel", "password text", "popup menu", "progress bar", "push button",
    "radio button", "radio menu item", "root pane", "row header", "scroll bar", "scroll pane",
    "separator", "slider", "spin button", "split pane", "status bar", "table", "table cell",
    "table column header", "table row header", "tearoff menu item", "terminal", "text",
    "toggle button", "tool bar", "tool tip", "tree", "tree table", "unknown", "viewport",
    "window", "extended", "header", "footer", "paragraph", "ruler", "application",
    "autocomplete", "editbar", "embedded", "entry", "chart", "caption", "document frame",
    "heading", "page", "section", "redundant object", "form", "link", "input method window",
    "table row", "tree item", "document spreadsheet", "document presentation", "document text",
    "document web", "document email", "comment", "list box", "grouping", "image map",
    "notification", "info bar", "level bar", "title bar", "block quote", "audio", "video",
    "definition", "article", "landmark", "log", "marquee", "math", "rating", "timer", "static",
    "math fraction", "math root", "subscript", "superscript", "description list",
    "description term", "description value", "footnote", "content deletion",
    "content insertion", "mark", "suggestion", "push button menu",
];

/// State names by AT-SPI state number, as libatspi spells them.
#[rustfmt::skip]
const STATE_NAMES: [&str; 44] = [
    "invalid", "active", "armed", "busy", "checked", "collapsed", "defunct", "editable",
    "enabled", "expandable", "expanded", "focusable", "focused", "has-tooltip", "horizontal",
    "iconified", "modal", "multi-line", "multiselectable", "opaque", "pressed", "resizable",
    "selectable", "selected", "sensitive", "showing", "single-line", "stale", "transient",
    "vertical", "visible", "manages-descendants", "indeterminate", "required", "truncated",
    "animated", "invalid-entry", "supports-autocompletion", "selectable-text", "is-default",
    "visited", "checkable", "has-popup", "read-only",
];

/// The accessibility tree service: one AT-SPI bus connection, opened on first use and
/// reopened after its session went away.
#[derive(Debug)]
pub(crate) struct A11y {
    /// Fixed bus locations; `None` reads the process environment at every connect, so a
    /// restarted desktop session is found once the environment points at it.
    env: Option<SessionEnv>,
    /// The AT-SPI bus; dropped when a walk finds it dead.
    conn: Option<zbus::Connection>,
    /// Direct connections to applications (atk-bridge's peer-to-peer sockets), by bus name.
    /// They take the bus daemon, which otherwise relays every call and reply and costs as
    /// much CPU as the applications themselves, out of the walk.
    peers: HashMap<String, zbus::Connection>,
    /// Whether applications' caches are used. Only turned off to check and time the cache
    /// against the plain walk.
    use_cache: bool,
}

impl A11y {
    /// A service that connects on first use, with the buses named by the process environment
    /// (`DBUS_SESSION_BUS_ADDRESS`, `XDG_RUNTIME_DIR`, `AT_SPI_BUS_ADDRESS`, `DISPLAY`).
    pub(crate) fn new() -> Self {
        Self {
            env: None,
            conn: None,
            peers: HashMap::new(),
            use_cache: true,
        }
    }

    async fn try_tree(
        &mut self,
        req: &TreeRequest,
        active_pid: Option<u32>,
        started: Instant,
    ) -> Result<UiTree, WireError> {
        let env = self.env.clone().unwrap_or_else(SessionEnv::from_process);
        let conn = match &self.conn {
            Some(conn) => conn.clone(),
            None => {
                let conn = connect(&env)
                    .await
                    .map_err(|why| WireError::Accessibility {
                        message: format!(
                            "AT-SPI bus not reachable ({why}): is at-spi2-core installed, and \
                         DBUS_SESSION_BUS_ADDRESS (or AT_SPI_BUS_ADDRESS) set for the agent to \
                         the desktop session's bus?"
                        ),
                    })?;
                self.conn = Some(conn.clone());
                // Unique names are reused by a new bus.
                self.peers.clear();
                conn
            }
        };
        let screen = match x_screen(env.display.clone()).await {
            Some(screen) => Some(screen),
            None => desktop_extents(&conn).await,
        };
        let peers = std::mem::take(&mut self.peers);
        let walk = Arc::new(Walk::new(conn, peers, req, screen, self.use_cache, started));
        let result = walk.clone().run(&req.scope, active_pid).await;
        self.peers = std::mem::take(&mut *lock(&walk.peers));
        match result {
            Ok(root) => Ok(UiTree {
                node_count: u32::try_from(root.count()).unwrap_or(u32::MAX),
                root,
                truncated: walk.truncated.load(Ordering::Relaxed),
                walk_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            }),
            Err(why) => {
                self.conn = None;
                Err(WireError::Accessibility {
                    message: format!(
                        "AT-SPI bus failed ({why}); the desktop session may have ended, the next \
                         request reconnects"
                    ),
                })
            }
        }
    }
}

impl Accessibility for A11y {
    /// The UI tree `req` asks for. `active_pid` is the process of the focused window, which
    /// `TreeScope::ActiveApp` selects.
    async fn tree(
        &mut self,
        req: &TreeRequest,
        active_pid: Option<u32>,
    ) -> Result<UiTree, WireError> {
        let started = Instant::now();
        let reused = self.conn.is_some();
        let tree = match self.try_tree(req, active_pid, started).await {
            // The connection worked before, so its session may have been replaced: one more
            // try on a fresh connection.
            Err(_) if reused && self.conn.is_none() => {
                self.try_tree(req, active_pid, started).await
            }
            result => result,
        };
        // A walk allocates and frees thousands of messages and strings (tens of MB for a
        // spreadsheet); what it freed below live data would stay resident.
        crate::memory::give_back();
        tree
    }
}

impl Default for A11y {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the buses are.
#[derive(Debug, Clone, Default)]
struct SessionEnv {
    /// `AT_SPI_BUS_ADDRESS`: the AT-SPI bus itself, which libatspi honours before asking the
    /// session bus.
    a11y_bus: Option<String>,
    /// `DBUS_SESSION_BUS_ADDRESS`.
    session_bus: Option<String>,
    /// `XDG_RUNTIME_DIR`, where the session bus and the AT-SPI bus have their default sockets.
    runtime_dir: Option<String>,
    /// `DISPLAY`, whose screen bounds `visible_only`.
    display: Option<String>,
}

impl SessionEnv {
    fn from_process() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Self {
            a11y_bus: var("AT_SPI_BUS_ADDRESS"),
            session_bus: var("DBUS_SESSION_BUS_ADDRESS"),
            runtime_dir: var("XDG_RUNTIME_DIR"),
            display: var("DISPLAY"),
        }
    }
}

/// Opens the AT-SPI bus and registers for an event, which activates every application's
/// bridge (and its cache).
async fn connect(env: &SessionEnv) -> Result<zbus::Connection, String> {
    let address = match &env.a11y_bus {
        Some(address) => address.clone(),
        None => a11y_bus_address(env).await?,
    };
    let open = async {
        zbus::connection::Builder::address(address.as_str())?
            .build()
            .await
    };
    let conn = timeout(CONNECT_TIMEOUT, open)
        .await
        .map_err(|_| format!("connecting to {address} timed out"))?
        .map_err(|e| format!("cannot connect to {address}: {e}"))?;
    let event = (ACTIVATION_EVENT, Vec::<String>::new(), "");
    let register = conn.call_method(
        Some(REGISTRY),
        "/org/a11y/atspi/registry",
        Some("org.a11y.atspi.Registry"),
        "RegisterEvent",
        &event,
    );
    // Without it the walk still works, only without caches.
    match timeout(CALL_TIMEOUT, register).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!("AT-SPI event registration failed: {e}"),
        Err(_) => tracing::debug!("AT-SPI event registration timed out"),
    }
    Ok(conn)
}

/// The AT-SPI bus address, from the session bus's `org.a11y.Bus`, or the socket
/// at-spi-bus-launcher leaves in the runtime directory.
async fn a11y_bus_address(env: &SessionEnv) -> Result<String, String> {
    let session = env.session_bus.clone().or_else(|| {
        env.runtime_dir
            .as_ref()
            .map(|dir| format!("unix:path={dir}/bus"))
    });
    let mut why = "no session bus: DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are unset".into();
    if let Some(session) = session {
        let ask = async {
            let conn = zbus::connection::Builder::address(session.as_str())?
                .build()
                .await?;
            let reply = conn
                .call_method(
                    Some("org.a11y.Bus"),
                    "/org/a11y/bus",
                    Some("org.a11y.Bus"),
                    "GetAddress",
                    &(),
                )
                .await?;
            reply.body().deserialize::<String>()
        };
        match timeout(CONNECT_TIMEOUT, ask).await {
            Ok(Ok(address)) if !address.is_empty() => return Ok(address),
            Ok(Ok(_)) => why = format!("session bus {session} has no AT-SPI bus"),
            Ok(Err(e)) => why = format!("session bus {session}: {e}"),
            Err(_) => why = format!("session bus {session} did not answer"),
        }
    }
    if let Some(dir) = &env.runtime_dir {
        // at-spi-bus-launcher names its socket after the display it was started for.
        let display = env.display.as_deref().and_then(display_number);
        let names = display.map(|n| format!("bus_{n}")).into_iter();
        for name in names.chain(["bus".to_owned()]) {
            let socket = format!("{dir}/at-spi/{name}");
            if std::path::Path::new(&socket).exists() {
                return Ok(format!("unix:path={socket}"));
            }
        }
    }
    Err(why)
}

/// The display number in an X display name (`:1`, `:1.0`, `host:1`).
fn display_number(display: &str) -> Option<u32> {
    let (_, screen) = display.rsplit_once(':')?;
    screen.split('.').next()?.parse().ok()
}

/// The size of the X screen, which AT-SPI's desktop may not know (at-spi2-registryd 2.46
/// reports 1024x768 whatever the screen).
async fn x_screen(display: Option<String>) -> Option<Rect> {
    let display = display?;
    let query = tokio::task::spawn_blocking(move || {
        let (_conn, root) = crate::x11::connect(Some(&display)).ok()?;
        Some(Rect::new(
            0,
            0,
            u32::from(root.width_in_pixels),
            u32::from(root.height_in_pixels),
        ))
    });
    timeout(CALL_TIMEOUT, query).await.ok()?.ok()?
}

/// The desktop's extents: the screen where X cannot be asked (no `DISPLAY`), though
/// at-spi2-registryd may not know it either.
async fn desktop_extents(conn: &zbus::Connection) -> Option<Rect> {
    let call = conn.call_method(
        Some(REGISTRY),
        ROOT_PATH,
        Some(COMPONENT),
        "GetExtents",
        &(SCREEN_COORDS,),
    );
    let reply = timeout(CALL_TIMEOUT, call).await.ok()?.ok()?;
    bounds(reply.body().deserialize().ok()?)
}

/// An object reference as the wire carries it: bus name and object path.
type WireRef = (String, OwnedObjectPath);

/// An accessible object: the bus name of its application and its path there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Obj {
    bus: String,
    path: String,
}

impl Obj {
    fn new(bus: &str, path: &str) -> Self {
        Self {
            bus: bus.to_owned(),
            path: path.to_owned(),
        }
    }

    /// The object, unless the reference is AT-SPI's null object.
    fn from_wire((bus, path): WireRef) -> Option<Self> {
        let path = path.as_str();
        (!bus.is_empty() && path != NULL_PATH && !path.is_empty()).then(|| Self {
            bus,
            path: path.to_owned(),
        })
    }
}

/// The AT-SPI interfaces the walk reads, of those an object implements.
#[derive(Debug, Clone, Copy, Default)]
struct Ifaces {
    component: bool,
    text: bool,
    value: bool,
    action: bool,
    table: bool,
    application: bool,
}

impl Ifaces {
    fn parse(names: &[String]) -> Self {
        let mut ifaces = Self::default();
        for name in names {
            match name.as_str() {
                COMPONENT => ifaces.component = true,
                TEXT => ifaces.text = true,
                VALUE => ifaces.value = true,
                ACTION => ifaces.action = true,
                TABLE => ifaces.table = true,
                APPLICATION => ifaces.application = true,
                _ => {}
            }
        }
        ifaces
    }
}

/// What an object is: from its application's cache, or read live.
#[derive(Debug, Clone, Default)]
struct Core {
    role: u32,
    name: String,
    description: String,
    /// State bits, bit n for AT-SPI state n.
    states: u64,
    ifaces: Ifaces,
    /// Number of children, if known.
    child_count: Option<i32>,
    /// The children in order, if known.
    children: Option<Vec<Obj>>,
}

impl Core {
    fn has(&self, state: u32) -> bool {
        self.states & (1 << state) != 0
    }
}

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
type AppCache = HashMap<String, Core>;

/// A `GetItems` entry since at-spi2-core 2.35: object, application, parent, index in parent,
/// child count, interfaces, name, role, description, states.
type CacheItem = (
    WireRef,
    WireRef,
    WireRef,
    i32,
    i32,
    Vec<String>,
    String,
    u32,
    String,
    Vec<u32>,
);

/// A `GetItems` entry from older bridges (and Qt): object, application, parent, children,
/// interfaces, name, role, description, states.
type LegacyCacheItem = (
    WireRef,
    WireRef,
    WireRef,
    Vec<WireRef>,
    Vec<String>,
    String,
    u32,
    String,
    Vec<u32>,
);

/// The cache of application `bus` from a `GetItems` reply in either format.
fn parse_cache(bus: &str, reply: &zbus::Message) -> Option<AppCache> {
    let body = reply.body();
    if let Ok(items) = body.deserialize::<Vec<CacheItem>>() {
        return Some(cache_from_items(bus, items));
    }
    let items = body.deserialize::<Vec<LegacyCacheItem>>().ok()?;
    let mut cache = AppCache::with_capacity(items.len());
    for (object, _, _, children, ifaces, name, role, description, states) in items {
        let Some(obj) = Obj::from_wire(object).filter(|o| o.bus == bus) else {
            continue;
        };
        let states = state_bits(&states);
        let children: Vec<Obj> = children.into_iter().filter_map(Obj::from_wire).collect();
        // Such a bridge lists no children for nodes that manage their descendants; their
        // count has to be asked for.
        let listed = states & (1 << STATE_MANAGES_DESCENDANTS) == 0;
        cache.insert(
            obj.path,
            Core {
                role,
                name,
                description,
                states,
                ifaces: Ifaces::parse(&ifaces),
                child_count: listed.then(|| i32::try_from(children.len()).unwrap_or(i32::MAX)),
                children: listed.then_some(children),
            },
        );
    }
    Some(cache)
}

/// Builds the cache from items that name their parent and index: a parent's child list is
/// trusted only when its cached children are exactly indices 0..child_count.
fn cache_from_items(bus: &str, items: Vec<CacheItem>) -> AppCache {
    let mut cache = AppCache::with_capacity(items.len());
    let mut kids: HashMap<String, Vec<(i32, Obj)>> = HashMap::new();
    for (object, _, parent, index, count, ifaces, name, role, description, states) in items {
        let Some(obj) = Obj::from_wire(object).filter(|o| o.bus == bus) else {
            continue;
        };
        if let Some(parent) = Obj::from_wire(parent).filter(|p| p.bus == bus) {
            kids.entry(parent.path)
                .or_default()
                .push((index, obj.clone()));
        }
        let states = state_bits(&states);
        // atk-bridge does not count the children of objects that manage their descendants
        // and says -1; the real count is asked for when needed.
        let count = Some(count).filter(|_| states & (1 << STATE_MANAGES_DESCENDANTS) == 0);
        cache.insert(
            obj.path,
            Core {
                role,
                name,
                description,
                states,
                ifaces: Ifaces::parse(&ifaces),
                child_count: count,
                children: (count == Some(0)).then(Vec::new),
            },
        );
    }
    for (parent, mut list) in kids {
        let Some(core) = cache.get_mut(&parent) else {
            continue;
        };
        list.sort_by_key(|(index, _)| *index);
        let complete = usize::try_from(core.child_count.unwrap_or(-1)) == Ok(list.len())
            && list
                .iter()
                .enumerate()
                .all(|(i, (index, _))| usize::try_from(*index) == Ok(i));
        if complete {
            core.children = Some(list.into_iter().map(|(_, obj)| obj).collect());
        }
    }
    cache
}

/// State bits from AT-SPI's `au` (32 states per word).
fn state_bits(words: &[u32]) -> u64 {
    words
        .iter()
        .take(2)
        .enumerate()
        .fold(0, |bits, (i, w)| bits | u64::from(*w) << (32 * i))
}

fn state_names(bits: u64) -> Vec<String> {
    STATE_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| *i > 0 && bits & (1 << i) != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

fn role_name(role: u32) -> String {
    let name = usize::try_from(role)
        .ok()
        .and_then(|i| ROLE_NAMES.get(i))
        .unwrap_or(&"unknown");
    (*name).to_owned()
}

/// Bounds from `GetExtents`, or `None` for the ones AT-SPI reports for unmapped objects
/// (`i32::MIN` corners, empty or negative sizes).
fn bounds((x, y, width, height): (i32, i32, i32, i32)) -> Option<Rect> {
    let width = u32::try_from(width).ok().filter(|w| *w > 0)?;
    let height = u32::try_from(height).ok().filter(|h| *h > 0)?;
    (x != i32::MIN && y != i32::MIN).then(|| Rect::new(x, y, width, height))
}

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
        }
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
struct Walk {
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
    fn new(
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
    async fn run(
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
        if self.use_cache {
            let items = self
                .call_raw(&app, &app.bus, CACHE_PATH, CACHE, "GetItems", &())
                .await;
            if let Some(cache) = items.ok().and_then(|r| parse_cache(&app.bus, &r)) {
                let _ = app.cache.set(cache);
            }
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
        let is_app = matches!(kind, Kind::App);
        let cached = app.cached(&obj).cloned();
        let live = cached.is_none();
        let mut core = match (cached, kind) {
            (Some(core), _) => core,
            (None, Kind::Cell(hint)) => Core {
                states: state_bits(
                    &self
                        .on::<Vec<u32>, _>(app, &obj, ACCESSIBLE, "GetState", &())
                        .await
                        .ok()?,
                ),
                ifaces: hint.ifaces,
                ..Default::default()
            },
            (None, _) => {
                let (states, ifaces) = futures::join!(
                    self.on::<Vec<u32>, _>(app, &obj, ACCESSIBLE, "GetState", &()),
                    self.on::<Vec<String>, _>(app, &obj, ACCESSIBLE, "GetInterfaces", &()),
                );
                Core {
                    states: state_bits(&states.ok()?),
                    ifaces: Ifaces::parse(&ifaces.unwrap_or_default()),
                    ..Default::default()
                }
            }
        };
        let hint = match kind {
            Kind::Cell(hint) => Some(hint),
            Kind::App | Kind::Node => None,
        };
        let cell = hint.is_some();
        if self.drops(&core, is_app) {
            return None;
        }
        let mut extents = hint.and_then(|h| h.bounds).map(Some);
        if let Some(screen) = self.visible.filter(|_| !is_app && core.ifaces.component) {
            let rect = match extents {
                Some(rect) => rect,
                None => self.extents(app, &obj).await,
            };
            // A showing node without usable bounds is kept (GTK's current notebook page
            // reports bogus extents, yet its children are on screen); one that is not
            // showing is hidden.
            let off_screen = match rect {
                Some(r) => r.intersect(&screen).is_none(),
                None => !core.has(STATE_SHOWING),
            };
            if off_screen {
                return None;
            }
            extents = Some(rect);
        }
        if !slot.take() {
            return None;
        }

        let ifaces = core.ifaces;
        // Children the cache already lists are walked while this node's own properties are
        // read, not after: a level of the tree then costs one round trip, not two, which
        // matters most when the application is busy drawing between calls.
        let listed = match &core.children {
            Some(children) if depth < self.max_depth && !core.has(STATE_MANAGES_DESCENDANTS) => {
                Some(self.visit_kids(
                    app,
                    children.iter().map(|c| (c.clone(), Kind::Node)).collect(),
                    depth,
                ))
            }
            _ => None,
        };
        let (own, listed) = futures::join!(
            async {
                futures::join!(
                    async {
                        if live {
                            self.live_core(app, &obj, hint.and_then(|h| h.role)).await
                        } else {
                            None
                        }
                    },
                    async {
                        match extents {
                            Some(rect) => rect,
                            None if ifaces.component => self.extents(app, &obj).await,
                            None => None,
                        }
                    },
                    async {
                        if live || !self.attributes {
                            None
                        } else {
                            self.attributes(app, &obj).await
                        }
                    },
                    async {
                        if ifaces.action {
                            self.actions(app, &obj).await
                        } else {
                            Vec::new()
                        }
                    },
                    async {
                        if ifaces.text {
                            // A cell's text is bounded by its application: no need to ask its
                            // length first, whatever its multi-line state says.
                            self.text(app, &obj, core.has(STATE_MULTI_LINE) && !cell)
                                .await
                        } else {
                            None
                        }
                    },
                    async {
                        if ifaces.value {
                            self.property::<f64>(app, &obj, VALUE, "CurrentValue")
                                .await
                                .filter(|v| v.is_finite())
                        } else {
                            None
                        }
                    },
                    async {
                        if is_app && ifaces.application && self.attributes {
                            self.toolkit(app, &obj).await
                        } else {
                            Vec::new()
                        }
                    },
                )
            },
            async {
                match listed {
                    Some(visits) => Some(visits.await),
                    None => None,
                }
            },
        );
        let (about, rect, attributes, actions, text, value, toolkit) = own;
        let mut attributes = attributes;
        if let Some(about) = about {
            core.role = about.role;
            core.name = about.name;
            core.description = about.description;
            core.child_count = about.child_count;
            attributes = match about.attributes {
                Some(attributes) => Some(attributes),
                // Bridges other than atk-bridge have no `Attributes` property.
                None if self.attributes => self.attributes(app, &obj).await,
                None => None,
            };
        } else if live {
            // The object went away between the calls.
            return None;
        }
        let mut attributes: BTreeMap<String, String> =
            attributes.unwrap_or_default().into_iter().collect();
        attributes.extend(toolkit);
        let children = match listed {
            Some(children) => children,
            None => {
                let (kids, note) = self.children(app, &obj, &core, rect, depth).await;
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
            text,
            value,
            states: state_names(core.states),
            bounds: rect,
            actions,
            attributes,
            children,
        })
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
                Some(core) if self.drops(core, false) => continue,
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
    fn drops(&self, core: &Core, is_app: bool) -> bool {
        core.has(STATE_DEFUNCT) || (self.showing_only && !is_app && !core.has(STATE_SHOWING))
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

    /// An application's toolkit and its version, as attributes.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{DbusSession, Xvfb, wait_for};
    use std::process::Command;

    const SCREEN: Rect = Rect {
        x: 0,
        y: 0,
        width: 1920,
        height: 1080,
    };

    /// A private desktop with its own session bus, and an `A11y` pointed at it.
    struct Desk {
        a11y: A11y,
        rt: tokio::runtime::Runtime,
        bus: DbusSession,
        x: Xvfb,
    }

    impl Desk {
        fn start() -> Self {
            let x = Xvfb::start(SCREEN.width, SCREEN.height);
            let bus = DbusSession::start(&x.display);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            let a11y = A11y {
                env: Some(env_of(&x, &bus)),
                conn: None,
                peers: HashMap::new(),
                use_cache: true,
            };
            Self { a11y, rt, bus, x }
        }

        fn envs(&self) -> Vec<(String, String)> {
            self.bus.envs(&self.x.display)
        }

        fn launch(&self, argv: &[&str]) -> crate::testutil::App {
            crate::testutil::App::start(argv, &self.envs())
        }

        fn tree(&mut self, req: &TreeRequest, pid: Option<u32>) -> Result<UiTree, WireError> {
            self.rt.block_on(self.a11y.tree(req, pid))
        }

        /// Walks until `ready` holds (apps take a moment to show up on the bus).
        fn wait(
            &mut self,
            req: &TreeRequest,
            pid: Option<u32>,
            ready: impl Fn(&UiTree) -> bool,
        ) -> UiTree {
            self.wait_up_to(Duration::from_secs(30), req, pid, ready)
        }

        fn wait_up_to(
            &mut self,
            limit: Duration,
            req: &TreeRequest,
            pid: Option<u32>,
            ready: impl Fn(&UiTree) -> bool,
        ) -> UiTree {
            wait_for(limit, || {
                let tree = self.tree(req, pid).ok()?;
                ready(&tree).then_some(tree)
            })
            .unwrap_or_else(|| panic!("no tree satisfying the condition for {req:?}"))
        }
    }

    fn env_of(x: &Xvfb, bus: &DbusSession) -> SessionEnv {
        SessionEnv {
            a11y_bus: None,
            session_bus: Some(bus.address.clone()),
            runtime_dir: Some(bus.runtime_dir.path().display().to_string()),
            display: Some(x.display.clone()),
        }
    }

    fn req(scope: TreeScope, showing_only: bool) -> TreeRequest {
        TreeRequest {
            scope,
            showing_only,
            ..Default::default()
        }
    }

    fn app(name: &str) -> TreeScope {
        TreeScope::App(name.into())
    }

    /// The nodes from `root` down to the first node satisfying `pred`.
    fn path_to<'a>(root: &'a UiNode, pred: &dyn Fn(&UiNode) -> bool) -> Option<Vec<&'a UiNode>> {
        if pred(root) {
            return Some(vec![root]);
        }
        root.children.iter().find_map(|c| {
            let mut path = path_to(c, pred)?;
            path.insert(0, root);
            Some(path)
        })
    }

    fn inside(inner: Rect, outer: Rect) -> bool {
        inner.intersect(&outer) == Some(inner)
    }

    fn has_button(name: &'static str) -> impl Fn(&UiTree) -> bool {
        move |t| {
            t.root
                .find(|n| n.role == "push button" && n.name == name)
                .is_some()
        }
    }

    #[test]
    fn bogus_extents_have_no_bounds() {
        assert_eq!(bounds((10, 20, 30, 40)), Some(Rect::new(10, 20, 30, 40)));
        assert_eq!(bounds((i32::MIN, i32::MIN, 100, 100)), None);
        assert_eq!(bounds((5, i32::MIN, 100, 100)), None);
        assert_eq!(bounds((0, 0, 0, 0)), None);
        assert_eq!(bounds((0, 0, -1, 20)), None);
        assert_eq!(bounds((-1, -1, -1, -1)), None);
        // Partly off screen is still real.
        assert_eq!(bounds((-5, -5, 10, 10)), Some(Rect::new(-5, -5, 10, 10)));
    }

    #[test]
    fn names_come_from_atspi_numbers() {
        assert_eq!(role_name(43), "push button");
        assert_eq!(role_name(61), "text");
        assert_eq!(role_name(75), "application");
        assert_eq!(role_name(92), "document spreadsheet");
        assert_eq!(role_name(129), "push button menu");
        assert_eq!(role_name(130), "unknown");
        assert_eq!(role_name(u32::MAX), "unknown");
        let bits = state_bits(&[1 << STATE_SHOWING, 1 << 3]);
        assert_eq!(bits, 1 << STATE_SHOWING | 1 << 35);
        let names = state_names(state_bits(&[1 << 7 | 1 << 25, 1 << 11]));
        assert_eq!(names, ["editable", "showing", "read-only"]);
        // Unknown bits and extra words are ignored, bit 0 ("invalid") is not a state.
        assert_eq!(
            state_names(state_bits(&[1, 1 << 31, 7])),
            Vec::<String>::new()
        );
    }

    /// A reply carrying `body`.
    fn reply<B: Serialize + DynamicType>(body: &B) -> zbus::Message {
        zbus::Message::method_call(CACHE_PATH, "GetItems")
            .and_then(|m| m.build(body))
            .expect("message")
    }

    #[test]
    fn both_cache_formats_are_read() {
        let r = |p: &str| {
            (
                ":1.5".to_owned(),
                OwnedObjectPath::try_from(p).expect("path"),
            )
        };
        let states = vec![1 << STATE_SHOWING, 0];
        let legacy: Vec<LegacyCacheItem> = vec![
            (
                r("/a/p"),
                r(ROOT_PATH),
                r(NULL_PATH),
                vec![r("/a/1")],
                vec![],
                "p".into(),
                39,
                String::new(),
                states.clone(),
            ),
            (
                r("/a/1"),
                r(ROOT_PATH),
                r("/a/p"),
                vec![],
                vec![TEXT.into()],
                "one".into(),
                29,
                "d".into(),
                states,
            ),
        ];
        let msg = reply(&(legacy,));
        let cache = parse_cache(":1.5", &msg).expect("legacy cache");
        assert_eq!(cache["/a/p"].children, Some(vec![Obj::new(":1.5", "/a/1")]));
        assert_eq!(cache["/a/1"].name, "one");
        assert_eq!(cache["/a/1"].description, "d");
        assert!(cache["/a/1"].ifaces.text);
        let current = vec![item("/a/1", "/a/p", 0, 0), item("/a/p", NULL_PATH, -1, 1)];
        let msg = reply(&(current,));
        let cache = parse_cache(":1.5", &msg).expect("cache");
        assert_eq!(cache["/a/p"].children, Some(vec![Obj::new(":1.5", "/a/1")]));
        // Anything else is no cache.
        let msg = reply(&(vec![1u32, 2],));
        assert!(parse_cache(":1.5", &msg).is_none());
    }

    #[test]
    fn display_numbers_are_parsed() {
        assert_eq!(display_number(":0"), Some(0));
        assert_eq!(display_number(":12.0"), Some(12));
        assert_eq!(display_number("host:3"), Some(3));
        assert_eq!(display_number("wayland-0"), None);
    }

    #[test]
    fn text_is_capped_on_character_boundaries() {
        assert_eq!(cap_chars("héllo".into(), 2), "hé");
        assert_eq!(cap_chars("héllo".into(), 10), "héllo");
        assert_eq!(cap_chars("abc".into(), 0), "");
    }

    fn item(path: &str, parent: &str, index: i32, count: i32) -> CacheItem {
        let r = |p: &str| {
            (
                ":1.5".to_owned(),
                OwnedObjectPath::try_from(p).expect("path"),
            )
        };
        (
            r(path),
            r(ROOT_PATH),
            r(parent),
            index,
            count,
            vec![ACCESSIBLE.into(), COMPONENT.into()],
            path.into(),
            43,
            String::new(),
            vec![1 << STATE_SHOWING, 0],
        )
    }

    #[test]
    fn cached_child_lists_are_trusted_only_when_complete() {
        let items = vec![
            item("/a/2", "/a/p", 1, 0),
            item("/a/1", "/a/p", 0, 0),
            item("/a/p", NULL_PATH, -1, 2),
            // /a/q says 3 children but only 2 are cached: one was added without a signal.
            item("/a/q", NULL_PATH, -1, 3),
            item("/a/3", "/a/q", 0, 0),
            item("/a/4", "/a/q", 2, 0),
        ];
        let cache = cache_from_items(":1.5", items);
        let kids = |p: &str| {
            cache[p]
                .children
                .as_ref()
                .map(|c| c.iter().map(|o| o.path.clone()).collect::<Vec<_>>())
        };
        assert_eq!(
            kids("/a/p"),
            Some(vec!["/a/1".to_owned(), "/a/2".to_owned()])
        );
        assert_eq!(kids("/a/q"), None);
        assert_eq!(kids("/a/1"), Some(vec![]));
        assert_eq!(cache["/a/p"].role, 43);
        assert!(cache["/a/1"].ifaces.component && !cache["/a/1"].ifaces.text);
        // Objects that manage their descendants are cached with a child count of -1.
        let mut table = item("/a/t", NULL_PATH, -1, -1);
        table.9 = vec![1 << STATE_SHOWING | 1 << STATE_MANAGES_DESCENDANTS, 0];
        let cache = cache_from_items(":1.5", vec![table]);
        assert_eq!(cache["/a/t"].child_count, None);
        assert!(cache["/a/t"].children.is_none());
        // Objects of other applications are not taken.
        let foreign = cache_from_items(":1.9", vec![item("/a/1", "/a/p", 0, 0)]);
        assert!(foreign.is_empty());
    }

    #[test]
    fn zenity_entry_buttons_and_text_are_read() {
        let mut desk = Desk::start();
        let zenity = desk.launch(&[
            "zenity",
            "--entry",
            "--text",
            "Name?",
            "--entry-text",
            "hello pincer",
        ]);
        let req = req(app("zenity"), true);
        let tree = desk.wait(&req, None, has_button("OK"));
        let root = &tree.root;
        assert_eq!(root.role, "application");
        assert_eq!(root.name, "zenity");
        assert_eq!(root.attributes.get("pid"), Some(&zenity.pid().to_string()));
        assert!(
            root.attributes.contains_key("toolkit"),
            "{:?}",
            root.attributes
        );
        assert_eq!(tree.node_count as usize, root.count());
        assert!(!tree.truncated);
        assert!(tree.walk_us > 0);

        let entry = root
            .find(|n| n.text.as_deref() == Some("hello pincer"))
            .expect("the entry's text");
        assert_eq!(entry.role, "text");
        assert!(entry.has_state("editable"), "{:?}", entry.states);
        assert!(entry.has_state("showing"));

        for name in ["OK", "Cancel"] {
            let path = path_to(root, &|n| n.role == "push button" && n.name == name)
                .unwrap_or_else(|| panic!("{name} button in {}", root.to_xml()));
            let button = path[path.len() - 1];
            let window = path[1];
            let b = button.bounds.expect("button bounds");
            let w = window.bounds.expect("window bounds");
            assert!(b.width > 10 && b.height > 10, "{name}: {b:?}");
            assert!(inside(b, SCREEN), "{name} {b:?} off screen");
            assert!(inside(b, w), "{name} {b:?} outside its window {w:?}");
            assert!(
                button.actions.iter().any(|a| a == "click"),
                "{:?}",
                button.actions
            );
            assert!(button.has_state("sensitive"));
        }

        // Without attributes: the same nodes, and none of GTK's attributes or the toolkit.
        let bare = desk
            .tree(
                &TreeRequest {
                    attributes: false,
                    ..req.clone()
                },
                None,
            )
            .expect("tree without attributes");
        assert_eq!(bare.node_count, tree.node_count);
        assert!(!bare.root.attributes.contains_key("toolkit"));
        let with: usize = root.walk().map(|(_, n)| n.attributes.len()).sum();
        let without: usize = bare
            .root
            .walk()
            .map(|(_, n)| n.attributes.keys().filter(|k| *k != "pid").count())
            .sum();
        assert!(with > 0, "GTK nodes carry attributes");
        assert_eq!(without, 0, "{}", bare.root.to_xml());
        drop(zenity);
    }

    #[test]
    fn filters_shrink_the_tree_and_limits_truncate_it() {
        let mut desk = Desk::start();
        let _factory = desk.launch(&["gtk3-widget-factory"]);
        let scope = app("widget-factory");
        let full = desk.wait(&req(scope.clone(), false), None, |t| t.node_count > 100);
        let showing = desk
            .tree(&req(scope.clone(), true), None)
            .expect("showing tree");
        let visible = desk
            .tree(
                &TreeRequest {
                    visible_only: true,
                    ..req(scope.clone(), false)
                },
                None,
            )
            .expect("visible tree");
        eprintln!(
            "gtk3-widget-factory: {} nodes, {} showing, {} on screen",
            full.node_count, showing.node_count, visible.node_count
        );
        for t in [&full, &showing, &visible] {
            assert_eq!(t.node_count as usize, t.root.count());
            assert!(!t.truncated);
        }
        // Pages 2 and 3 are not showing: a large part of the tree.
        assert!(
            showing.node_count * 3 / 2 < full.node_count,
            "{} vs {}",
            showing.node_count,
            full.node_count
        );
        assert!(showing.node_count > 100);
        for (depth, n) in showing.root.walk().filter(|(d, _)| *d > 0) {
            assert!(n.has_state("showing"), "{n:?} at {depth}");
        }
        assert!(visible.node_count < full.node_count);
        for (_, n) in visible.root.walk().skip(1) {
            if let Some(b) = n.bounds {
                assert!(b.intersect(&SCREEN).is_some(), "{n:?}");
            }
        }

        let shallow = desk
            .tree(
                &TreeRequest {
                    max_depth: Some(3),
                    ..req(scope.clone(), true)
                },
                None,
            )
            .expect("depth-limited tree");
        assert!(shallow.truncated);
        assert!(shallow.root.walk().all(|(d, _)| d <= 3));
        assert!(shallow.root.walk().any(|(d, _)| d == 3));
        assert!(shallow.node_count < showing.node_count);

        let few = desk
            .tree(
                &TreeRequest {
                    max_nodes: Some(25),
                    ..req(scope, true)
                },
                None,
            )
            .expect("node-limited tree");
        assert!(few.truncated);
        assert!(
            few.node_count <= 25 && few.node_count >= 20,
            "{}",
            few.node_count
        );
        assert_eq!(few.node_count as usize, few.root.count());
    }

    #[test]
    fn scopes_select_applications() {
        let mut desk = Desk::start();
        let zenity = desk.launch(&["zenity", "--question", "--text", "Proceed?"]);
        let factory = desk.launch(&["gtk3-widget-factory"]);
        let desktop = desk.wait(&req(TreeScope::Desktop, true), None, |t| {
            t.root.children.len() >= 2 && has_button("Yes")(t)
        });
        assert_eq!(desktop.root.role, "desktop frame");
        assert_eq!(desktop.root.bounds, Some(SCREEN));
        let apps: Vec<_> = desktop
            .root
            .children
            .iter()
            .map(|a| a.name.as_str())
            .collect();
        assert!(apps.contains(&"zenity"), "{apps:?}");
        assert!(
            apps.iter().any(|a| a.contains("widget-factory")),
            "{apps:?}"
        );
        assert!(
            desktop
                .root
                .children
                .iter()
                .all(|a| a.role == "application")
        );

        let only = desk.tree(&req(app("ZENITY"), true), None).expect("zenity");
        assert_eq!(only.root.role, "application");
        assert_eq!(only.root.name, "zenity");
        let in_desktop = desktop.root.children.iter().find(|a| a.name == "zenity");
        assert_eq!(only.root.count(), in_desktop.expect("zenity").count());
        assert!(only.node_count * 4 < desktop.node_count);

        let active = desk
            .tree(&req(TreeScope::ActiveApp, true), Some(factory.pid()))
            .expect("active app");
        assert!(
            active.root.name.contains("widget-factory"),
            "{}",
            active.root.name
        );
        assert_eq!(
            active.root.attributes.get("pid"),
            Some(&factory.pid().to_string())
        );
        let active = desk
            .tree(&req(TreeScope::ActiveApp, true), Some(zenity.pid()))
            .expect("active app");
        assert_eq!(active.root.name, "zenity");

        for (scope, pid) in [
            (TreeScope::ActiveApp, Some(1)),
            (TreeScope::ActiveApp, None),
            (app("no-such-app"), None),
        ] {
            let none = desk.tree(&req(scope, true), pid).expect("empty tree");
            assert_eq!(none.root.role, "desktop frame");
            assert!(none.root.children.is_empty());
            assert!(none.root.attributes.contains_key(NOTE_ATTR));
        }
    }

    /// Signature of a tree for comparing walks: role, name and states of every node, in order.
    fn shape(root: &UiNode) -> Vec<String> {
        root.walk()
            .map(|(d, n)| {
                format!(
                    "{d} {} {:?} {:?} {}",
                    n.role,
                    n.name,
                    n.states,
                    n.children.len()
                )
            })
            .collect()
    }

    #[test]
    fn cache_and_live_walks_agree() {
        let mut desk = Desk::start();
        let _factory = desk.launch(&["gtk3-widget-factory"]);
        let req = req(app("widget-factory"), false);
        let _ = desk.wait(&req, None, |t| t.node_count > 100);
        let cached = desk.tree(&req, None).expect("cached walk");
        desk.a11y.use_cache = false;
        let live = desk.tree(&req, None).expect("live walk");
        let (a, b) = (shape(&cached.root), shape(&live.root));
        let first_diff = a.iter().zip(&b).position(|(x, y)| x != y);
        assert!(
            a == b,
            "cache and live walks differ at {first_diff:?}: {:?} vs {:?}",
            first_diff.map(|i| &a[i]),
            first_diff.map(|i| &b[i])
        );
        assert_eq!(cached.root, live.root);
    }

    #[test]
    fn a_hung_app_is_skipped_not_waited_for() {
        let mut desk = Desk::start();
        let zenity = desk.launch(&["zenity", "--question", "--text", "Proceed?"]);
        let _factory = desk.launch(&["gtk3-widget-factory"]);
        let req = req(TreeScope::Desktop, true);
        let _ = desk.wait(&req, None, |t| {
            t.root.children.len() >= 2 && has_button("Yes")(t)
        });
        // A stopped process keeps its bus connection but answers nothing: a hang.
        let pid = i32::try_from(zenity.pid()).expect("pid");
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let started = Instant::now();
        let tree = desk.tree(&req, None);
        let took = started.elapsed();
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let tree = tree.expect("tree despite the hung app");
        assert!(took < CALL_TIMEOUT * 3, "took {took:?}");
        assert!(tree.truncated);
        let hung = tree
            .root
            .children
            .iter()
            .find(|a| a.attributes.contains_key(ERROR_ATTR))
            .expect("the hung app is marked");
        assert_eq!(hung.attributes.get("pid"), Some(&zenity.pid().to_string()));
        let factory = tree
            .root
            .children
            .iter()
            .find(|a| a.name.contains("widget-factory"));
        let factory = factory.expect("the other app is walked");
        assert!(!factory.attributes.contains_key(ERROR_ATTR));
        assert!(factory.count() > 100);
        // Once it runs again, it is walked again.
        let _ = desk.wait(&req, None, has_button("Yes"));
    }

    #[test]
    fn an_unreachable_bus_is_an_error_and_a_new_session_works() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let nowhere = tempfile::tempdir().expect("tempdir");
        let mut a11y = A11y {
            env: Some(SessionEnv {
                session_bus: Some(format!("unix:path={}/bus", nowhere.path().display())),
                runtime_dir: Some(nowhere.path().display().to_string()),
                ..Default::default()
            }),
            conn: None,
            peers: HashMap::new(),
            use_cache: true,
        };
        // The server runs walks on a multi-threaded runtime.
        fn send<T: Send>(t: T) -> T {
            t
        }
        let err = rt
            .block_on(send(a11y.tree(&TreeRequest::default(), None)))
            .expect_err("no bus");
        let WireError::Accessibility { message } = err else {
            panic!("wrong error: {err:?}");
        };
        assert!(message.contains("DBUS_SESSION_BUS_ADDRESS"), "{message}");

        let x = Xvfb::start(SCREEN.width, SCREEN.height);
        let req = req(app("zenity"), true);
        let walk_until_ok = |a11y: &mut A11y| {
            wait_for(Duration::from_secs(30), || {
                let t = rt.block_on(a11y.tree(&req, None)).ok()?;
                has_button("Yes")(&t).then_some(t)
            })
            .expect("zenity's tree")
        };
        let first = DbusSession::start(&x.display);
        let zenity =
            crate::testutil::App::start(&["zenity", "--question"], &first.envs(&x.display));
        a11y.env = Some(env_of(&x, &first));
        walk_until_ok(&mut a11y);
        assert!(a11y.conn.is_some());

        // An agent without the session bus still finds the AT-SPI bus's socket.
        let mut fallback = A11y {
            env: Some(SessionEnv {
                session_bus: Some(format!("unix:path={}/bus", nowhere.path().display())),
                ..env_of(&x, &first)
            }),
            conn: None,
            peers: HashMap::new(),
            use_cache: true,
        };
        walk_until_ok(&mut fallback);
        drop(fallback);

        // The session ends (its bus, the AT-SPI bus and the registry with it).
        drop(zenity);
        drop(first);
        let started = Instant::now();
        let err = rt
            .block_on(a11y.tree(&req, None))
            .expect_err("the session is gone");
        assert!(matches!(err, WireError::Accessibility { .. }), "{err:?}");
        assert!(started.elapsed() < CONNECT_TIMEOUT * 3);

        let second = DbusSession::start(&x.display);
        let _zenity =
            crate::testutil::App::start(&["zenity", "--question"], &second.envs(&x.display));
        a11y.env = Some(env_of(&x, &second));
        walk_until_ok(&mut a11y);
    }

    fn stats(mut us: Vec<u64>) -> String {
        us.sort_unstable();
        let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        format!(
            "min {:.1} ms, p50 {:.1} ms, p95 {:.1} ms",
            at(0.0),
            at(0.5),
            at(0.95)
        )
    }

    /// CPU time used so far by process `pid`, in ms (0 when it is gone).
    fn cpu_ms(pid: u32) -> u64 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return 0;
        };
        let Some(close) = stat.rfind(')') else {
            return 0;
        };
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // utime and stime, in clock ticks of 10 ms.
        (ticks(11) + ticks(12)) * 10
    }

    /// Times `runs` walks of `req`, with the cache and without, and the CPU the agent and
    /// the walked `apps` spent per walk.
    fn measure(desk: &mut Desk, what: &str, req: &TreeRequest, apps: &[u32], runs: usize) {
        let agent = std::process::id();
        let cpu = |pids: &[u32]| pids.iter().map(|p| cpu_ms(*p)).sum::<u64>();
        for use_cache in [true, false] {
            desk.a11y.use_cache = use_cache;
            let mut times = Vec::new();
            let mut nodes = 0;
            let (agent_before, apps_before) = (cpu(&[agent]), cpu(apps));
            for _ in 0..runs {
                let started = Instant::now();
                let tree = desk.tree(req, None).expect("tree");
                times.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
                nodes = tree.node_count;
            }
            let runs = runs as u64;
            eprintln!(
                "{what:<40} {} {nodes:>5} nodes: {}; CPU per walk: agent {} ms, app {} ms",
                if use_cache { "cache" } else { "live " },
                stats(times),
                (cpu(&[agent]) - agent_before) / runs,
                (cpu(apps) - apps_before) / runs,
            );
        }
        desk.a11y.use_cache = true;
    }

    /// Timings of GTK apps. Run with
    /// `cargo test --release -p pincer-agent measure_gtk -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement"]
    fn measure_gtk() {
        let mut desk = Desk::start();
        let factory = desk.launch(&["gtk3-widget-factory"]);
        let mut argv = vec!["zenity", "--list", "--column=Name", "--column=Value"];
        let rows: Vec<String> = (0..40)
            .flat_map(|i| [format!("row {i}"), format!("{}", i * 7)])
            .collect();
        argv.extend(rows.iter().map(String::as_str));
        let list = desk.launch(&argv);
        let _ = desk.wait(&req(app("zenity"), true), None, |t| t.node_count > 50);
        let _ = desk.wait(&req(app("widget-factory"), true), None, |t| {
            t.node_count > 100
        });
        let (factory, list) = (factory.pid(), list.pid());
        let cases = [
            (
                "widget-factory, showing",
                req(app("widget-factory"), true),
                vec![factory],
            ),
            (
                "widget-factory, everything",
                req(app("widget-factory"), false),
                vec![factory],
            ),
            (
                "zenity --list (40 rows), showing",
                req(app("zenity"), true),
                vec![list],
            ),
            (
                "desktop (both apps), showing",
                req(TreeScope::Desktop, true),
                vec![factory, list],
            ),
        ];
        for (what, req, apps) in cases {
            measure(&mut desk, what, &req, &apps, 30);
        }
    }

    /// Starts LibreOffice Calc on a 300x26 sheet of values (cell (r, c) holds r*26+c), its
    /// window filling the screen as on a benchmark VM, and waits for the sheet's cells.
    fn calc(desk: &mut Desk, dir: &std::path::Path) -> (crate::testutil::App, UiTree) {
        let csv = dir.join("values.csv");
        let rows: Vec<String> = (0..300)
            .map(|row| {
                let cells: Vec<String> = (0..26).map(|col| (row * 26 + col).to_string()).collect();
                cells.join(",")
            })
            .collect();
        std::fs::write(&csv, rows.join("\n") + "\n").expect("csv");
        open_in_calc(desk, dir, &csv)
    }

    /// Converts `doc` to ODS with a headless Calc (which also sets up the profile in `dir`:
    /// a bare `soffice.bin` on a fresh profile exits to be restarted), opens the result in
    /// Calc, full screen, and waits for its grid's cells.
    fn open_in_calc(
        desk: &mut Desk,
        dir: &std::path::Path,
        doc: &std::path::Path,
    ) -> (crate::testutil::App, UiTree) {
        let profile = format!("-env:UserInstallation=file://{}/profile", dir.display());
        let status = Command::new("soffice")
            .args([
                profile.as_str(),
                "--headless",
                "--convert-to",
                "ods",
                "--outdir",
            ])
            .arg(dir)
            .arg(doc)
            .envs(desk.envs())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("LibreOffice is installed");
        let ods = doc.with_extension("ods");
        assert!(status.success() && ods.exists(), "conversion failed");
        // soffice.bin itself, not the soffice script and oosplash, so that drop kills it.
        let calc = desk.launch(&[
            "/usr/lib/libreoffice/program/soffice.bin",
            profile.as_str(),
            "--norestore",
            "--nologo",
            "--calc",
            ods.to_str().expect("utf-8 path"),
        ]);
        // `--sync` waits forever: bounded, so that a Calc that never shows fails the test.
        let status = Command::new("timeout")
            .args([
                "120",
                "xdotool",
                "search",
                "--sync",
                "--onlyvisible",
                "--name",
                "LibreOffice Calc",
            ])
            .args([
                "windowmove",
                "%1",
                "0",
                "0",
                "windowsize",
                "%1",
                "1920",
                "1080",
            ])
            .envs(desk.envs())
            .status()
            .expect("xdotool is installed");
        assert!(status.success(), "no Calc window within 120 s");
        let req = req(app("soffice"), true);
        let tree = desk.wait_up_to(Duration::from_secs(120), &req, None, |t| {
            let table = t.root.find(|n| n.role == "table");
            table.is_some_and(|t| t.children.len() > 1000)
        });
        (calc, tree)
    }

    /// A merged title over columns A-C must not widen column A's cells: boxes of a grid's
    /// cells come from its rows and columns only where the first and last rows agree.
    #[test]
    fn merged_cells_do_not_misplace_a_column() {
        let mut desk = Desk::start();
        let dir = tempfile::tempdir().expect("tempdir");
        let rows: String = (0..60)
            .map(|r| {
                let cells: String = (0..8)
                    .map(|c| {
                        format!(
                            "<table:table-cell office:value-type=\"float\" office:value=\"{0}\"><text:p>{0}</text:p></table:table-cell>",
                            r * 8 + c
                        )
                    })
                    .collect();
                format!("<table:table-row>{cells}</table:table-row>")
            })
            .collect();
        let doc = format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.2" office:mimetype="application/vnd.oasis.opendocument.spreadsheet">
<office:body><office:spreadsheet><table:table table:name="Sheet1">
<table:table-row><table:table-cell table:number-columns-spanned="3" office:value-type="string"><text:p>Title</text:p></table:table-cell><table:covered-table-cell/><table:covered-table-cell/></table:table-row>
{rows}
</table:table></office:spreadsheet></office:body></office:document>"#
        );
        let fods = dir.path().join("merged.fods");
        std::fs::write(&fods, doc).expect("fods");
        let (_calc, tree) = open_in_calc(&mut desk, dir.path(), &fods);
        let table = tree.root.find(|n| n.role == "table").expect("the grid");
        let cell = |name: &str| {
            table
                .children
                .iter()
                .find(|c| c.name == name)
                .and_then(|c| c.bounds)
                .unwrap_or_else(|| panic!("{name} with bounds"))
        };
        let (a1, a2, b2, c2, a3) = (cell("A1"), cell("A2"), cell("B2"), cell("C2"), cell("A3"));
        // The merged title spans three columns; the cells below it are one column wide.
        assert!(a1.width >= 3 * a2.width - 3, "A1 {a1:?} A2 {a2:?}");
        assert_eq!(a2.x, a3.x);
        assert_eq!(a2.width, a3.width);
        assert_eq!(
            i64::from(a2.x) + i64::from(a2.width),
            i64::from(b2.x),
            "A2 {a2:?} ends where B2 {b2:?} starts"
        );
        assert_eq!(i64::from(b2.x) + i64::from(b2.width), i64::from(c2.x));
        assert_eq!(
            table
                .children
                .iter()
                .find(|c| c.name == "B2")
                .and_then(|c| c.text.as_deref()),
            Some("1")
        );
    }

    #[test]
    fn calc_grid_gives_the_cells_on_screen() {
        let mut desk = Desk::start();
        let dir = tempfile::tempdir().expect("tempdir");
        let (calc, tree) = calc(&mut desk, dir.path());
        assert_eq!(
            tree.root.attributes.get("pid"),
            Some(&calc.pid().to_string())
        );
        assert!(!tree.truncated);
        assert!(
            tree.root
                .find(|n| n.attributes.contains_key(ERROR_ATTR))
                .is_none()
        );
        let table = tree.root.find(|n| n.role == "table").expect("the grid");
        let area = table.bounds.expect("grid bounds");
        let note = &table.attributes[NOTE_ATTR];
        assert!(
            note.starts_with(&format!(
                "only the {} cells on screen",
                table.children.len()
            )),
            "{note}"
        );
        assert!(
            table
                .children
                .iter()
                .all(|c| c.role == "table cell" && c.has_state("showing"))
        );
        for cell in &table.children {
            let b = cell.bounds.expect("cell bounds");
            assert!(
                b.intersect(&area).is_some(),
                "{} {b:?} outside {area:?}",
                cell.name
            );
        }
        // Rows then columns, from A1: B2 is row 1, column 1.
        let cell = |name: &str| table.children.iter().find(|c| c.name == name);
        assert_eq!(table.children[0].name, "A1");
        let b2 = cell("B2").expect("B2");
        assert_eq!(b2.text.as_deref(), Some("27"));
        assert_eq!(b2.value, Some(27.0));
        assert_eq!(cell("Z3").and_then(|c| c.text.as_deref()), Some("77"));
        assert_eq!(cell("AA3").and_then(|c| c.text.as_deref()), Some(""));
        let few = desk
            .tree(
                &TreeRequest {
                    max_nodes: Some(300),
                    ..req(app("soffice"), true)
                },
                None,
            )
            .expect("node-limited tree");
        assert!(few.truncated);
        assert!(
            few.node_count <= 300 && few.node_count >= 295,
            "{} nodes: {:?}",
            few.node_count,
            few.root.attributes
        );
        // Calc is still responsive: nothing made it enumerate its 2^31 cells.
        let everything = desk.tree(&req(app("soffice"), false), None).expect("tree");
        assert!(everything.node_count > tree.node_count);
        assert!(
            everything
                .root
                .find(|n| n.attributes.contains_key(ERROR_ATTR))
                .is_none()
        );
        eprintln!(
            "calc: {} nodes showing ({} cells), {} in all, {} of at most 300",
            tree.node_count,
            table.children.len(),
            everything.node_count,
            few.node_count
        );
    }

    /// Timings of LibreOffice Calc. Run with
    /// `cargo test --release -p pincer-agent measure_calc -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement"]
    fn measure_calc() {
        let mut desk = Desk::start();
        let dir = tempfile::tempdir().expect("tempdir");
        let (calc, _) = calc(&mut desk, dir.path());
        let pid = [calc.pid()];
        let scope = app("soffice");
        measure(
            &mut desk,
            "calc 300x26, showing",
            &req(scope.clone(), true),
            &pid,
            20,
        );
        measure(
            &mut desk,
            "calc 300x26, everything",
            &req(scope, false),
            &pid,
            10,
        );
    }
}
