//! The X11 `CLIPBOARD` selection as text: read for the `Clipboard` probe, written by setup.
//!
//! X has no clipboard store: the owner of the selection keeps the data and converts it for
//! every client that asks. So writing starts an owner, a thread with its own connection and
//! window that answers `SelectionRequest`s (`TARGETS`, `UTF8_STRING`, `text/plain;charset=utf-8`,
//! `TEXT`, and `STRING` when the text is Latin-1) for as long as this value lives or until
//! another client takes the selection. Reading asks the current owner to convert to
//! `UTF8_STRING` (then `STRING`) onto a property of our own window, following the `INCR`
//! protocol for large transfers in both directions.
//!
//! Why not arboard: arboard 3's X11 backend always connects to `$DISPLAY` and keeps one
//! process-wide clipboard context, so it can neither honour the display this agent was given
//! nor serve two displays in one process (parallel tests), and its context only resets once
//! every handle to it is dropped.

use crate::x11::{self, Client, Lazy, lost};
use pincer_guest_core::platform;
use pincer_shared::WireError;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use x11rb::COPY_DEPTH_FROM_PARENT;
use x11rb::connection::Connection as _;
use x11rb::errors::{ConnectionError, ReplyError};
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    self, AtomEnum, ChangeWindowAttributesAux, ConnectionExt as _, CreateWindowAux, EventMask,
    PropMode, Property, SelectionNotifyEvent, SelectionRequestEvent, WindowClass,
};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

x11rb::atom_manager! {
    /// Atoms of the selection protocol.
    Atoms: AtomsCookie {
        CLIPBOARD,
        TARGETS,
        UTF8_STRING,
        TEXT,
        INCR,
        TEXT_PLAIN_UTF8: b"text/plain;charset=utf-8",
        // The property on our reader window that owners convert into.
        PINCER_CLIPBOARD,
    }
}

/// Most bytes of clipboard text read or served.
const MAX_TEXT: usize = pincer_shared::limits::MAX_CLIPBOARD_TEXT;
/// Text larger than this is served incrementally (`INCR`), in chunks of this size, so that
/// no single request comes near the server's request size limit.
const INCR_CHUNK: usize = 256 * 1024;
/// How long an owner may take to answer one step of a conversion.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
/// An incremental transfer whose requestor stops reading is abandoned after this long.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads and writes the clipboard of one X display.
#[derive(Debug)]
pub(crate) struct Clipboard {
    /// Connection for reading.
    reader: Lazy<Reader>,
    /// The serving thread of the text we set last, if any.
    owner: Lazy<Owner>,
}

impl Clipboard {
    /// The clipboard of `display` (`None`: `$DISPLAY`). Connects on first use.
    pub(crate) fn new(display: Option<String>) -> Self {
        Self {
            reader: Lazy::new(display.clone()),
            owner: Lazy::new(display),
        }
    }
}

impl platform::Clipboard for Clipboard {
    /// The clipboard's text; `None` when nobody owns the clipboard or its owner offers no text.
    fn get_text(&mut self) -> Result<Option<String>, WireError> {
        self.reader.with(|reader| reader.text())
    }

    /// Puts `text` on the clipboard and keeps serving it to other clients after returning,
    /// until another client takes the clipboard or this value is dropped.
    fn set_text(&mut self, text: &str) -> Result<(), WireError> {
        if text.len() > MAX_TEXT {
            return Err(WireError::TooLarge {
                what: "clipboard text".into(),
                limit: MAX_TEXT as u64,
                got: text.len() as u64,
            });
        }
        self.owner.with(|owner| owner.own(text))
    }
}

/// Our side of reading: a connection and a window that owners convert into.
struct Reader {
    conn: RustConnection,
    window: xproto::Window,
    atoms: Atoms,
}

impl Client for Reader {
    fn connect(display: Option<&str>) -> Result<Self, WireError> {
        let (conn, atoms, window) = connect_with_window(display)?;
        Ok(Self {
            conn,
            window,
            atoms,
        })
    }

    /// Also drops events left over from an earlier conversion (one that timed out).
    fn alive(&mut self) -> bool {
        loop {
            match self.conn.poll_for_event() {
                Ok(Some(_)) => {}
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    }
}

impl Reader {
    /// The window owning the clipboard selection now.
    fn owner(&self) -> Result<xproto::Window, WireError> {
        Ok(self
            .conn
            .get_selection_owner(self.atoms.CLIPBOARD)
            .map_err(lost)?
            .reply()
            .map_err(refused)?
            .owner)
    }

    fn text(&self) -> Result<Option<String>, WireError> {
        let atoms = &self.atoms;
        let owner = self.owner()?;
        if owner == x11rb::NONE {
            return Ok(None);
        }
        for target in [atoms.UTF8_STRING, AtomEnum::STRING.into()] {
            let converted = match self.convert(target) {
                // The owner may have exited while we asked (an app closing right after a
                // copy): then the clipboard is simply empty now.
                Err(WireError::Timeout { .. }) if self.owner()? == x11rb::NONE => return Ok(None),
                other => other?,
            };
            if let Some((kind, bytes)) = converted {
                return Ok(Some(if kind == u32::from(AtomEnum::STRING) {
                    // ISO Latin-1: every byte is the code point.
                    bytes.iter().map(|&b| char::from(b)).collect()
                } else {
                    String::from_utf8_lossy(&bytes).into_owned()
                }));
            }
        }
        Ok(None)
    }

    /// Asks the owner for the clipboard as `target`; `None` when it refuses.
    fn convert(&self, target: xproto::Atom) -> Result<Option<(xproto::Atom, Vec<u8>)>, WireError> {
        let atoms = &self.atoms;
        let property = atoms.PINCER_CLIPBOARD;
        self.conn
            .convert_selection(
                self.window,
                atoms.CLIPBOARD,
                target,
                property,
                x11rb::CURRENT_TIME,
            )
            .map_err(lost)?;
        self.conn.flush().map_err(lost)?;
        let notify = self.wait(|e| match e {
            Event::SelectionNotify(n)
                if n.requestor == self.window
                    && n.selection == atoms.CLIPBOARD
                    && n.target == target =>
            {
                Some(n.property)
            }
            _ => None,
        })?;
        if notify == x11rb::NONE {
            return Ok(None);
        }
        let (kind, bytes) = self.take_property()?;
        if kind != atoms.INCR {
            return Ok(Some((kind, bytes)));
        }
        // INCR: taking the property asked for the first chunk; each chunk arrives as a new
        // value of the property, and an empty one ends the transfer.
        let mut data = Vec::new();
        let mut chunk_kind = kind;
        loop {
            self.wait(|e| match e {
                Event::PropertyNotify(p)
                    if p.window == self.window
                        && p.atom == property
                        && p.state == Property::NEW_VALUE =>
                {
                    Some(())
                }
                _ => None,
            })?;
            let (kind, chunk) = self.take_property()?;
            if chunk.is_empty() {
                return Ok(Some((chunk_kind, data)));
            }
            if data.len() + chunk.len() > MAX_TEXT {
                return Err(WireError::TooLarge {
                    what: "clipboard text".into(),
                    limit: MAX_TEXT as u64,
                    got: (data.len() + chunk.len()) as u64,
                });
            }
            chunk_kind = kind;
            data.extend_from_slice(&chunk);
        }
    }

    /// Reads and deletes the conversion property (deleting it is what moves INCR along).
    fn take_property(&self) -> Result<(xproto::Atom, Vec<u8>), WireError> {
        let words = (MAX_TEXT / 4 + 1) as u32;
        let reply = self
            .conn
            .get_property(
                true,
                self.window,
                self.atoms.PINCER_CLIPBOARD,
                AtomEnum::ANY,
                0,
                words,
            )
            .map_err(lost)?
            .reply()
            .map_err(refused)?;
        if reply.bytes_after > 0 {
            return Err(WireError::TooLarge {
                what: "clipboard text".into(),
                limit: MAX_TEXT as u64,
                got: reply.value.len() as u64 + u64::from(reply.bytes_after),
            });
        }
        Ok((reply.type_, reply.value))
    }

    /// The first event `want` accepts, waiting at most `ANSWER_TIMEOUT` for it.
    fn wait<T>(&self, mut want: impl FnMut(&Event) -> Option<T>) -> Result<T, WireError> {
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            while let Some(event) = self.conn.poll_for_event().map_err(lost)? {
                if let Some(found) = want(&event) {
                    return Ok(found);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WireError::Timeout {
                    after_ms: ANSWER_TIMEOUT.as_millis() as u64,
                });
            }
            x11::wait_readable(&self.conn, left);
        }
    }
}

/// The text we own and the thread that serves it.
struct Owner {
    shared: Arc<Shared>,
    /// Finishes when the connection breaks or the window is destroyed.
    thread: JoinHandle<()>,
}

/// What the serving thread and `set_text` share.
struct Shared {
    /// Used by both: the thread waits for events while `set_text` sends requests.
    conn: RustConnection,
    /// The selection owner window.
    window: xproto::Window,
    atoms: Atoms,
    /// The text served, as UTF-8.
    text: Mutex<Arc<str>>,
}

impl Client for Owner {
    fn connect(display: Option<&str>) -> Result<Self, WireError> {
        let (conn, atoms, window) = connect_with_window(display)?;
        let shared = Arc::new(Shared {
            conn,
            window,
            atoms,
            text: Mutex::new(Arc::from("")),
        });
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("clipboard-owner".into())
            .spawn(move || serving.serve())
            .map_err(|e| WireError::Internal {
                message: format!("cannot start the clipboard thread: {e}"),
            })?;
        Ok(Self { shared, thread })
    }

    /// The serving thread ends when its connection does.
    fn alive(&mut self) -> bool {
        !self.thread.is_finished()
    }
}

impl Owner {
    fn own(&self, text: &str) -> Result<(), WireError> {
        let shared = &self.shared;
        *shared.text.lock().unwrap_or_else(PoisonError::into_inner) = Arc::from(text);
        shared
            .conn
            .set_selection_owner(shared.window, shared.atoms.CLIPBOARD, x11rb::CURRENT_TIME)
            .map_err(lost)?;
        // Also the round trip that makes the ownership visible before we return.
        let owner = shared
            .conn
            .get_selection_owner(shared.atoms.CLIPBOARD)
            .map_err(lost)?
            .reply()
            .map_err(refused)?
            .owner;
        if owner != shared.window {
            return Err(WireError::Internal {
                message: "another X client took the clipboard at the same moment".into(),
            });
        }
        Ok(())
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        // Destroying the window gives up the selection and ends the thread (DestroyNotify).
        // Best effort: on a dead connection the thread has ended already.
        let _ = self.shared.conn.destroy_window(self.shared.window);
        let _ = self.shared.conn.flush();
    }
}

/// An incremental transfer in progress to one requestor.
struct Transfer {
    requestor: xproto::Window,
    property: xproto::Atom,
    kind: xproto::Atom,
    data: Arc<[u8]>,
    /// Bytes sent so far.
    sent: usize,
    /// When it began, to forget requestors that stopped reading.
    started: Instant,
}

impl Shared {
    fn serve(&self) {
        let mut transfers: Vec<Transfer> = Vec::new();
        loop {
            let Ok(event) = self.conn.wait_for_event() else {
                return;
            };
            // Nothing to do on failure: a requestor that vanished is no concern of ours, and
            // a broken connection ends the loop at the next wait.
            let _ = match event {
                Event::SelectionRequest(request) => self.answer(&request, &mut transfers),
                Event::PropertyNotify(p) if p.state == Property::DELETE => {
                    self.continue_transfer(p.window, p.atom, &mut transfers)
                }
                Event::DestroyNotify(d) if d.window == self.window => return,
                _ => Ok(()),
            };
        }
    }

    fn answer(
        &self,
        request: &SelectionRequestEvent,
        transfers: &mut Vec<Transfer>,
    ) -> Result<(), ConnectionError> {
        let atoms = &self.atoms;
        // Obsolete clients pass no property and mean the target's name.
        let property = if request.property == x11rb::NONE {
            request.target
        } else {
            request.property
        };
        let text = Arc::clone(&self.text.lock().unwrap_or_else(PoisonError::into_inner));
        let latin1: Option<Vec<u8>> = text.chars().map(|c| u8::try_from(c).ok()).collect();
        let string = u32::from(AtomEnum::STRING);
        let served = if request.selection != atoms.CLIPBOARD {
            false
        } else if request.target == atoms.TARGETS {
            let mut targets = vec![
                atoms.TARGETS,
                atoms.UTF8_STRING,
                atoms.TEXT_PLAIN_UTF8,
                atoms.TEXT,
            ];
            if latin1.is_some() {
                targets.push(string);
            }
            self.conn.change_property32(
                PropMode::REPLACE,
                request.requestor,
                property,
                AtomEnum::ATOM,
                &targets,
            )?;
            true
        } else if [atoms.UTF8_STRING, atoms.TEXT_PLAIN_UTF8, atoms.TEXT].contains(&request.target) {
            // TEXT lets the owner pick the encoding.
            let kind = if request.target == atoms.TEXT {
                atoms.UTF8_STRING
            } else {
                request.target
            };
            let bytes: Arc<[u8]> = Arc::from(text.as_bytes());
            self.send(request.requestor, property, kind, bytes, transfers)?;
            true
        } else if let (true, Some(bytes)) = (request.target == string, latin1) {
            self.send(request.requestor, property, string, bytes.into(), transfers)?;
            true
        } else {
            false
        };
        let notify = SelectionNotifyEvent {
            response_type: xproto::SELECTION_NOTIFY_EVENT,
            sequence: 0,
            time: request.time,
            requestor: request.requestor,
            selection: request.selection,
            target: request.target,
            property: if served { property } else { x11rb::NONE },
        };
        self.conn
            .send_event(false, request.requestor, EventMask::NO_EVENT, notify)?;
        self.conn.flush()
    }

    /// Puts `data` in the requestor's property, or starts an INCR transfer if it is large.
    fn send(
        &self,
        requestor: xproto::Window,
        property: xproto::Atom,
        kind: xproto::Atom,
        data: Arc<[u8]>,
        transfers: &mut Vec<Transfer>,
    ) -> Result<(), ConnectionError> {
        if data.len() <= INCR_CHUNK {
            self.conn
                .change_property8(PropMode::REPLACE, requestor, property, kind, &data)?;
            return Ok(());
        }
        // The requestor deleting the property asks for the next chunk: watch for it.
        self.conn.change_window_attributes(
            requestor,
            &ChangeWindowAttributesAux::new().event_mask(EventMask::PROPERTY_CHANGE),
        )?;
        self.conn.change_property32(
            PropMode::REPLACE,
            requestor,
            property,
            self.atoms.INCR,
            &[data.len() as u32],
        )?;
        transfers.retain(|t| {
            t.started.elapsed() < TRANSFER_TIMEOUT
                && (t.requestor, t.property) != (requestor, property)
        });
        transfers.push(Transfer {
            requestor,
            property,
            kind,
            data,
            sent: 0,
            started: Instant::now(),
        });
        Ok(())
    }

    fn continue_transfer(
        &self,
        window: xproto::Window,
        property: xproto::Atom,
        transfers: &mut Vec<Transfer>,
    ) -> Result<(), ConnectionError> {
        let Some(i) = transfers
            .iter()
            .position(|t| (t.requestor, t.property) == (window, property))
        else {
            return Ok(());
        };
        let transfer = &mut transfers[i];
        let end = (transfer.sent + INCR_CHUNK).min(transfer.data.len());
        let chunk = &transfer.data[transfer.sent..end];
        // An empty chunk tells the requestor the transfer is complete.
        let done = chunk.is_empty();
        self.conn
            .change_property8(PropMode::REPLACE, window, property, transfer.kind, chunk)?;
        transfer.sent = end;
        if done {
            transfers.remove(i);
        }
        self.conn.flush()
    }
}

/// A connection with atoms and a small unmapped window that receives property changes.
fn connect_with_window(
    display: Option<&str>,
) -> Result<(RustConnection, Atoms, xproto::Window), WireError> {
    let (conn, screen) = x11::connect(display)?;
    let root = screen.root;
    let atoms = Atoms::new(&conn).map_err(lost)?;
    let window = conn.generate_id().map_err(|e| WireError::Display {
        message: format!("cannot allocate an X window id: {e}"),
    })?;
    conn.create_window(
        COPY_DEPTH_FROM_PARENT,
        window,
        root,
        0,
        0,
        1,
        1,
        0,
        WindowClass::INPUT_ONLY,
        x11rb::COPY_FROM_PARENT,
        &CreateWindowAux::new()
            .event_mask(EventMask::PROPERTY_CHANGE | EventMask::STRUCTURE_NOTIFY),
    )
    .map_err(lost)?;
    let atoms = atoms.reply().map_err(refused)?;
    Ok((conn, atoms, window))
}

fn refused(e: ReplyError) -> WireError {
    x11::refused(e, "a clipboard request", |message| WireError::Internal {
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{FixedXvfb, Xvfb};
    use pincer_guest_core::platform::Clipboard as _;

    /// Reads the clipboard as `target` the way any other X client would, without following
    /// INCR: the property's type name and bytes, or `None` when the owner refuses.
    fn read_as(display: &str, target: &str) -> Option<(String, Vec<u8>)> {
        let (conn, atoms, window) = connect_with_window(Some(display)).unwrap();
        let intern = |name: &str| {
            conn.intern_atom(false, name.as_bytes())
                .unwrap()
                .reply()
                .unwrap()
                .atom
        };
        let (target, property) = (intern(target), intern("TEST_PROPERTY"));
        conn.convert_selection(
            window,
            atoms.CLIPBOARD,
            target,
            property,
            x11rb::CURRENT_TIME,
        )
        .unwrap();
        conn.flush().unwrap();
        let start = Instant::now();
        let notify = loop {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "no SelectionNotify"
            );
            match conn.poll_for_event().unwrap() {
                Some(Event::SelectionNotify(n)) => break n,
                Some(_) => {}
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        if notify.property == x11rb::NONE {
            return None;
        }
        let reply = conn
            .get_property(true, window, property, AtomEnum::ANY, 0, u32::MAX / 4)
            .unwrap()
            .reply()
            .unwrap();
        let name = conn
            .get_atom_name(reply.type_)
            .unwrap()
            .reply()
            .unwrap()
            .name;
        Some((String::from_utf8(name).unwrap(), reply.value))
    }

    fn atom_names(display: &str, value: &[u8]) -> Vec<String> {
        let (conn, _) = x11rb::connect(Some(display)).unwrap();
        value
            .chunks(4)
            .map(|w| {
                let atom = u32::from_ne_bytes(w.try_into().unwrap());
                let name = conn.get_atom_name(atom).unwrap().reply().unwrap().name;
                String::from_utf8(name).unwrap()
            })
            .collect()
    }

    #[test]
    fn values_are_send() {
        fn send<T: Send>() {}
        send::<Clipboard>();
    }

    #[test]
    fn an_empty_clipboard_has_no_text() {
        let x = Xvfb::start(320, 240);
        assert_eq!(
            Clipboard::new(Some(x.display.clone())).get_text().unwrap(),
            None
        );
    }

    #[test]
    fn set_text_is_served_to_other_clients() {
        let x = Xvfb::start(320, 240);
        let mut clipboard = Clipboard::new(Some(x.display.clone()));
        let text = "héllo ✓ 🦀\nzweite Zeile";
        clipboard.set_text(text).unwrap();
        assert_eq!(clipboard.get_text().unwrap().as_deref(), Some(text));

        // An independent client, after set_text returned.
        let (kind, bytes) = read_as(&x.display, "UTF8_STRING").unwrap();
        assert_eq!(
            (kind.as_str(), bytes.as_slice()),
            ("UTF8_STRING", text.as_bytes())
        );
        let (kind, targets) = read_as(&x.display, "TARGETS").unwrap();
        assert_eq!(kind, "ATOM");
        let targets = atom_names(&x.display, &targets);
        assert!(targets.contains(&"UTF8_STRING".to_owned()), "{targets:?}");
        assert!(
            !targets.contains(&"STRING".to_owned()),
            "not Latin-1: {targets:?}"
        );
        assert_eq!(read_as(&x.display, "STRING"), None);
        assert_eq!(read_as(&x.display, "image/png"), None);

        // Another reader on another thread and connection.
        let display = x.display.clone();
        let read = std::thread::spawn(move || Clipboard::new(Some(display)).get_text());
        assert_eq!(read.join().unwrap().unwrap().as_deref(), Some(text));

        // Latin-1 text is offered as STRING too.
        clipboard.set_text("Grüße").unwrap();
        let (kind, bytes) = read_as(&x.display, "STRING").unwrap();
        assert_eq!(
            (kind.as_str(), bytes.as_slice()),
            ("STRING", b"Gr\xfc\xdfe".as_slice())
        );
        assert_eq!(clipboard.get_text().unwrap().as_deref(), Some("Grüße"));
    }

    #[test]
    fn ownership_passes_between_clients() {
        let x = Xvfb::start(320, 240);
        let mut a = Clipboard::new(Some(x.display.clone()));
        let mut b = Clipboard::new(Some(x.display.clone()));
        a.set_text("from a").unwrap();
        b.set_text("from b").unwrap();
        assert_eq!(a.get_text().unwrap().as_deref(), Some("from b"));
        a.set_text("a again").unwrap();
        assert_eq!(b.get_text().unwrap().as_deref(), Some("a again"));
        // Dropping the owner gives the clipboard up.
        drop(a);
        let empty = crate::testutil::wait_for(Duration::from_secs(2), || {
            b.get_text().unwrap().is_none().then_some(())
        });
        assert!(empty.is_some());
    }

    #[test]
    fn large_text_goes_incrementally() {
        let x = Xvfb::start(320, 240);
        let mut owner = Clipboard::new(Some(x.display.clone()));
        let big: String = (0..3 * 1024 * 1024 / 8)
            .map(|i| format!("{:07}", i % 10_000_000) + if i % 9 == 0 { "é" } else { "\n" })
            .collect();
        owner.set_text(&big).unwrap();
        let (kind, _) = read_as(&x.display, "UTF8_STRING").unwrap();
        assert_eq!(kind, "INCR");
        let mut reader = Clipboard::new(Some(x.display.clone()));
        assert!(reader.get_text().unwrap() == Some(big.clone()));
        // And again: the owner forgot the finished transfer.
        assert!(reader.get_text().unwrap() == Some(big));
    }

    #[test]
    fn display_loss_is_reported_and_survived() {
        let mut x = FixedXvfb::start(193);
        let mut clipboard = Clipboard::new(Some(x.display.clone()));
        clipboard.set_text("before").unwrap();
        assert_eq!(clipboard.get_text().unwrap().as_deref(), Some("before"));
        x.kill();
        assert!(matches!(
            clipboard.get_text(),
            Err(WireError::Display { .. })
        ));
        assert!(matches!(
            clipboard.set_text("lost"),
            Err(WireError::Display { .. })
        ));
        x.restart();
        assert_eq!(clipboard.get_text().unwrap(), None);
        clipboard.set_text("after").unwrap();
        assert_eq!(clipboard.get_text().unwrap().as_deref(), Some("after"));
        assert_eq!(
            read_as(&x.display, "UTF8_STRING").map(|(_, b)| b),
            Some(b"after".to_vec())
        );
    }
}
