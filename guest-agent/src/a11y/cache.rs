//! What the walk knows of an object before it asks the object itself: references to
//! accessible objects ([`Obj`]), what an object is ([`Core`]: role, name, states,
//! interfaces, children), and an application's `org.a11y.atspi.Cache`, which gives the
//! cores of every object it caches in one `GetItems` call, read in either of the two
//! formats bridges send. Above the names, below the walk; it makes no call itself.

use super::names::{
    ACTION, APPLICATION, COMPONENT, NULL_PATH, STATE_MANAGES_DESCENDANTS, TABLE, TEXT, VALUE,
    state_bits,
};
use std::collections::HashMap;
use zbus::zvariant::OwnedObjectPath;

/// An object reference as the wire carries it: bus name and object path.
pub(super) type WireRef = (String, OwnedObjectPath);

/// An accessible object: the bus name of its application and its path there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Obj {
    pub(super) bus: String,
    pub(super) path: String,
}

impl Obj {
    pub(super) fn new(bus: &str, path: &str) -> Self {
        Self {
            bus: bus.to_owned(),
            path: path.to_owned(),
        }
    }

    /// The object, unless the reference is AT-SPI's null object.
    pub(super) fn from_wire((bus, path): WireRef) -> Option<Self> {
        let path = path.as_str();
        (!bus.is_empty() && path != NULL_PATH && !path.is_empty()).then(|| Self {
            bus,
            path: path.to_owned(),
        })
    }
}

/// The AT-SPI interfaces the walk reads, of those an object implements.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Ifaces {
    pub(super) component: bool,
    pub(super) text: bool,
    pub(super) value: bool,
    pub(super) action: bool,
    pub(super) table: bool,
    pub(super) application: bool,
}

impl Ifaces {
    /// The interfaces the walk reads among `names`.
    pub(super) fn parse(names: &[String]) -> Self {
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
pub(super) struct Core {
    pub(super) role: u32,
    pub(super) name: String,
    pub(super) description: String,
    /// State bits, bit n for AT-SPI state n.
    pub(super) states: u64,
    pub(super) ifaces: Ifaces,
    /// Number of children, if known.
    pub(super) child_count: Option<i32>,
    /// The children in order, if known.
    pub(super) children: Option<Vec<Obj>>,
}

impl Core {
    /// Whether the object is in AT-SPI state `state`.
    pub(super) fn has(&self, state: u32) -> bool {
        self.states & (1 << state) != 0
    }
}

pub(super) type AppCache = HashMap<String, Core>;

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
pub(super) fn parse_cache(bus: &str, reply: &zbus::Message) -> Option<AppCache> {
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
        let ifaces = Ifaces::parse(&ifaces);
        // atk-bridge does not count the children of objects that manage their descendants
        // and says -1; the real count is asked for when needed. GTK4 (4.8) caches its
        // application root with 0 children while `GetChildren` gives its windows, so an
        // application's count is asked for too.
        let count = Some(count)
            .filter(|_| states & (1 << STATE_MANAGES_DESCENDANTS) == 0 && !ifaces.application);
        cache.insert(
            obj.path,
            Core {
                role,
                name,
                description,
                states,
                ifaces,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a11y::names::{ACCESSIBLE, CACHE_PATH, ROOT_PATH, STATE_SHOWING};
    use serde::Serialize;
    use zbus::zvariant::DynamicType;

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
        // GTK4 caches its application root with 0 children although it has windows: an
        // application's children are asked for.
        let mut root = item(ROOT_PATH, NULL_PATH, -1, 0);
        root.5 = vec![ACCESSIBLE.into(), APPLICATION.into()];
        let window = item("/a/w", ROOT_PATH, 0, 0);
        let cache = cache_from_items(":1.5", vec![root, window]);
        assert_eq!(cache[ROOT_PATH].child_count, None);
        assert!(cache[ROOT_PATH].children.is_none());
        assert_eq!(cache["/a/w"].children, Some(vec![]));
        // Objects of other applications are not taken.
        let foreign = cache_from_items(":1.9", vec![item("/a/1", "/a/p", 0, 0)]);
        assert!(foreign.is_empty());
    }
}
