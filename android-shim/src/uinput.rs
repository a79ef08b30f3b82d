//! A virtual touchscreen and keyboard through `/dev/uinput`, which the adb `shell` user may
//! open on most devices (group `uhid`): a tap is a handful of `input_event`s written to one
//! descriptor, microseconds instead of the `input` command's tens to hundreds of
//! milliseconds (it starts a Java process each time). The events follow the Linux
//! multi-touch protocol (type B: tracking id, position, `BTN_TOUCH`, `SYN_REPORT`), as the
//! kernel passes them on to readers ([`Slot`]).
//! The byte layout is `struct input_event` on 64-bit Linux: a 16-byte time (zeros: the
//! kernel stamps events itself), then type, code and value.

use std::io::Write;

/// `EV_*` types.
pub(crate) const EV_SYN: u16 = 0x00;
/// Keys and buttons.
pub(crate) const EV_KEY: u16 = 0x01;
/// Absolute axes.
pub(crate) const EV_ABS: u16 = 0x03;
/// `SYN_REPORT`.
pub(crate) const SYN_REPORT: u16 = 0;
/// `BTN_TOUCH`.
pub(crate) const BTN_TOUCH: u16 = 0x14a;
/// `ABS_MT_SLOT`.
pub(crate) const ABS_MT_SLOT: u16 = 0x2f;
/// `ABS_MT_POSITION_X`.
pub(crate) const ABS_MT_POSITION_X: u16 = 0x35;
/// `ABS_MT_POSITION_Y`.
pub(crate) const ABS_MT_POSITION_Y: u16 = 0x36;
/// `ABS_MT_TRACKING_ID`.
pub(crate) const ABS_MT_TRACKING_ID: u16 = 0x39;

/// Linux key codes for the keys phones have.
pub(crate) const KEY_ENTER: u16 = 28;
/// Back.
pub(crate) const KEY_BACK: u16 = 158;
/// Home.
pub(crate) const KEY_HOMEPAGE: u16 = 172;
/// Recent apps.
pub(crate) const KEY_APPSELECT: u16 = 0x244;
/// Delete backwards.
pub(crate) const KEY_BACKSPACE: u16 = 14;

/// Size of `struct input_event` on 64-bit Linux.
pub(crate) const EVENT_SIZE: usize = 24;

/// One event as the kernel reads it.
pub(crate) fn event(kind: u16, code: u16, value: i32) -> [u8; EVENT_SIZE] {
    let mut e = [0u8; EVENT_SIZE];
    e[16..18].copy_from_slice(&kind.to_ne_bytes());
    e[18..20].copy_from_slice(&code.to_ne_bytes());
    e[20..24].copy_from_slice(&value.to_ne_bytes());
    e
}

/// The touchscreen's one slot as the kernel keeps it. The kernel passes an absolute value on
/// only when it differs from the one it holds for the slot (positions stay after a finger
/// lifts; a fresh device holds zeros), and a report only when something is in it; so the
/// shim sends exactly what readers get, and the `--uinput-log` stream is what a real
/// device's reader sees. Slot 0 is the only slot used and the one a fresh device starts in,
/// so no `ABS_MT_SLOT` is sent (the kernel passes a slot event on only when it changes).
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// The position the kernel holds.
    at: (i32, i32),
}

impl Slot {
    /// A finger down at `at`, a new contact with `tracking_id`.
    pub(crate) fn down(&mut self, at: (i32, i32), tracking_id: i32) -> Vec<u8> {
        let mut out = event(EV_ABS, ABS_MT_TRACKING_ID, tracking_id).to_vec();
        self.axes(at, &mut out);
        out.extend_from_slice(&event(EV_KEY, BTN_TOUCH, 1));
        out.extend_from_slice(&event(EV_SYN, SYN_REPORT, 0));
        out
    }

    /// The finger moved to `to`: the axes that changed; nothing when it stayed.
    pub(crate) fn moved(&mut self, to: (i32, i32)) -> Vec<u8> {
        let mut out = Vec::new();
        self.axes(to, &mut out);
        if !out.is_empty() {
            out.extend_from_slice(&event(EV_SYN, SYN_REPORT, 0));
        }
        out
    }

    /// The finger lifted: the contact ends.
    pub(crate) fn up(&mut self) -> Vec<u8> {
        [
            event(EV_ABS, ABS_MT_TRACKING_ID, -1),
            event(EV_KEY, BTN_TOUCH, 0),
            event(EV_SYN, SYN_REPORT, 0),
        ]
        .concat()
    }

    /// A touch stroke: down at the first point, moved through the rest, up at the last.
    pub(crate) fn stroke(&mut self, points: &[(i32, i32)], tracking_id: i32) -> Vec<u8> {
        let Some(&first) = points.first() else {
            return Vec::new();
        };
        let mut out = self.down(first, tracking_id);
        for &p in &points[1..] {
            out.extend_from_slice(&self.moved(p));
        }
        out.extend_from_slice(&self.up());
        out
    }

    fn axes(&mut self, to: (i32, i32), out: &mut Vec<u8>) {
        if to.0 != self.at.0 {
            out.extend_from_slice(&event(EV_ABS, ABS_MT_POSITION_X, to.0));
        }
        if to.1 != self.at.1 {
            out.extend_from_slice(&event(EV_ABS, ABS_MT_POSITION_Y, to.1));
        }
        self.at = to;
    }
}

/// A key pressed and released.
pub(crate) fn key(code: u16) -> Vec<u8> {
    [
        event(EV_KEY, code, 1),
        event(EV_SYN, SYN_REPORT, 0),
        event(EV_KEY, code, 0),
        event(EV_SYN, SYN_REPORT, 0),
    ]
    .concat()
}

/// Points from `from` to `to` in `steps` even moves (a swipe).
pub(crate) fn line(from: (i32, i32), to: (i32, i32), steps: u32) -> Vec<(i32, i32)> {
    let steps = steps.max(1) as i32;
    (0..=steps)
        .map(|i| {
            (
                from.0 + (to.0 - from.0) * i / steps,
                from.1 + (to.1 - from.1) * i / steps,
            )
        })
        .collect()
}

/// Where events go: a created uinput device, or (for tests and `--uinput-log`) any writer.
pub(crate) trait Sink: Send {
    /// Writes events and flushes them.
    fn send(&mut self, events: &[u8]) -> std::io::Result<()>;
}

impl<W: Write + Send> Sink for W {
    fn send(&mut self, events: &[u8]) -> std::io::Result<()> {
        self.write_all(events)?;
        self.flush()
    }
}

/// Creating the virtual devices needs the uinput ioctls, which only Linux has.
#[cfg(target_os = "linux")]
pub(crate) mod device {
    use super::*;
    use std::os::fd::AsRawFd;

    /// `_IOW('U', nr, size)` and `_IO('U', nr)`.
    const fn iow(nr: u64, size: u64) -> u64 {
        (1 << 30) | (size << 16) | ((b'U' as u64) << 8) | nr
    }
    const fn io(nr: u64) -> u64 {
        ((b'U' as u64) << 8) | nr
    }
    /// `_IOR('U', nr, size)`.
    const fn ior(nr: u64, size: u64) -> u64 {
        (2 << 30) | (size << 16) | ((b'U' as u64) << 8) | nr
    }
    const UI_DEV_CREATE: u64 = io(1);
    const SYSNAME_LEN: u64 = 64;
    const UI_GET_SYSNAME: u64 = ior(44, SYSNAME_LEN);
    const UI_DEV_SETUP: u64 = iow(3, 92);
    const UI_ABS_SETUP: u64 = iow(4, 28);
    const UI_SET_EVBIT: u64 = iow(100, 4);
    const UI_SET_KEYBIT: u64 = iow(101, 4);
    const UI_SET_ABSBIT: u64 = iow(103, 4);
    const UI_SET_PROPBIT: u64 = iow(110, 4);
    const INPUT_PROP_DIRECT: u64 = 1;

    fn ioctl(f: &std::fs::File, request: u64, arg: libc::c_ulong) -> std::io::Result<()> {
        // SAFETY: uinput ioctls with an integer or a pointer to a live, sized struct.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), request as _, arg) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// `struct uinput_setup`: id (bustype, vendor, product, version), name[80], effects.
    fn setup(f: &std::fs::File, name: &str) -> std::io::Result<()> {
        let mut s = [0u8; 92];
        s[0..2].copy_from_slice(&0x06u16.to_ne_bytes()); // BUS_VIRTUAL
        s[2..4].copy_from_slice(&0x7069u16.to_ne_bytes()); // "pi"
        s[4..6].copy_from_slice(&0x6e63u16.to_ne_bytes()); // "nc"
        s[6..8].copy_from_slice(&1u16.to_ne_bytes());
        let n = name.as_bytes();
        s[8..8 + n.len().min(79)].copy_from_slice(&n[..n.len().min(79)]);
        ioctl(f, UI_DEV_SETUP, s.as_ptr() as libc::c_ulong)
    }

    fn abs(f: &std::fs::File, code: u16, max: i32) -> std::io::Result<()> {
        ioctl(f, UI_SET_ABSBIT, libc::c_ulong::from(code))?;
        // `struct uinput_abs_setup`: code, pad, then absinfo (value, min, max, fuzz, flat,
        // resolution).
        let mut s = [0u8; 28];
        s[0..2].copy_from_slice(&code.to_ne_bytes());
        s[12..16].copy_from_slice(&max.to_ne_bytes());
        ioctl(f, UI_ABS_SETUP, s.as_ptr() as libc::c_ulong)
    }

    fn open(path: &str) -> std::io::Result<std::fs::File> {
        std::fs::OpenOptions::new().write(true).open(path)
    }

    /// A touchscreen of `width` x `height` pixels.
    pub(crate) fn touchscreen(
        path: &str,
        width: u32,
        height: u32,
    ) -> std::io::Result<std::fs::File> {
        let f = open(path)?;
        ioctl(&f, UI_SET_EVBIT, EV_KEY.into())?;
        ioctl(&f, UI_SET_EVBIT, EV_ABS.into())?;
        ioctl(&f, UI_SET_EVBIT, EV_SYN.into())?;
        ioctl(&f, UI_SET_KEYBIT, BTN_TOUCH.into())?;
        ioctl(&f, UI_SET_PROPBIT, INPUT_PROP_DIRECT as libc::c_ulong)?;
        abs(&f, ABS_MT_SLOT, 9)?;
        abs(&f, ABS_MT_TRACKING_ID, 65_535)?;
        abs(&f, ABS_MT_POSITION_X, width.saturating_sub(1) as i32)?;
        abs(&f, ABS_MT_POSITION_Y, height.saturating_sub(1) as i32)?;
        setup(&f, "pincer touchscreen")?;
        ioctl(&f, UI_DEV_CREATE, 0)?;
        Ok(f)
    }

    /// The name the kernel gave a device made through `f` (`input7`: its directory under
    /// `/sys/devices/virtual/input/`).
    pub(crate) fn sysname(f: &std::fs::File) -> std::io::Result<String> {
        let mut buf = [0u8; SYSNAME_LEN as usize];
        ioctl(f, UI_GET_SYSNAME, buf.as_mut_ptr() as libc::c_ulong)?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// A keyboard with the keys phones have.
    pub(crate) fn keyboard(path: &str) -> std::io::Result<std::fs::File> {
        let f = open(path)?;
        ioctl(&f, UI_SET_EVBIT, EV_KEY.into())?;
        ioctl(&f, UI_SET_EVBIT, EV_SYN.into())?;
        for k in [
            KEY_ENTER,
            KEY_BACK,
            KEY_HOMEPAGE,
            KEY_APPSELECT,
            KEY_BACKSPACE,
        ] {
            ioctl(&f, UI_SET_KEYBIT, k.into())?;
        }
        setup(&f, "pincer keyboard")?;
        ioctl(&f, UI_DEV_CREATE, 0)?;
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Vec<(u16, u16, i32)> {
        bytes
            .chunks_exact(EVENT_SIZE)
            .map(|e| {
                assert_eq!(&e[..16], &[0u8; 16], "the kernel stamps the time");
                (
                    u16::from_ne_bytes([e[16], e[17]]),
                    u16::from_ne_bytes([e[18], e[19]]),
                    i32::from_ne_bytes([e[20], e[21], e[22], e[23]]),
                )
            })
            .collect()
    }

    /// The event stream of a tap, byte for byte, as the kernel's `struct input_event`.
    #[test]
    fn a_tap_is_the_multitouch_protocol_byte_for_byte() {
        let bytes = Slot::default().stroke(&[(100, 200)], 7);
        assert_eq!(
            decode(&bytes),
            [
                (EV_ABS, ABS_MT_TRACKING_ID, 7),
                (EV_ABS, ABS_MT_POSITION_X, 100),
                (EV_ABS, ABS_MT_POSITION_Y, 200),
                (EV_KEY, BTN_TOUCH, 1),
                (EV_SYN, SYN_REPORT, 0),
                (EV_ABS, ABS_MT_TRACKING_ID, -1),
                (EV_KEY, BTN_TOUCH, 0),
                (EV_SYN, SYN_REPORT, 0),
            ]
        );
        // On a little-endian machine (arm64 and x86_64 phones both are), the raw bytes.
        #[cfg(target_endian = "little")]
        assert_eq!(
            &bytes[EVENT_SIZE + 16..2 * EVENT_SIZE],
            &[0x03, 0x00, 0x35, 0x00, 100, 0, 0, 0]
        );
    }

    /// What the kernel would drop is not sent: a position the slot already holds (after a
    /// lift too, and zeros on a fresh device), and a move that moved nothing.
    #[test]
    fn values_the_kernel_holds_are_not_sent_again() {
        let mut slot = Slot::default();
        let _ = slot.stroke(&[(100, 200)], 1);
        assert_eq!(
            decode(&slot.stroke(&[(100, 300)], 2))[..3],
            [
                (EV_ABS, ABS_MT_TRACKING_ID, 2),
                (EV_ABS, ABS_MT_POSITION_Y, 300),
                (EV_KEY, BTN_TOUCH, 1),
            ]
        );
        assert!(slot.moved((100, 300)).is_empty());
        assert_eq!(
            decode(&slot.moved((101, 300))),
            [(EV_ABS, ABS_MT_POSITION_X, 101), (EV_SYN, SYN_REPORT, 0)]
        );
        assert_eq!(
            decode(&Slot::default().down((0, 5), 3)),
            [
                (EV_ABS, ABS_MT_TRACKING_ID, 3),
                (EV_ABS, ABS_MT_POSITION_Y, 5),
                (EV_KEY, BTN_TOUCH, 1),
                (EV_SYN, SYN_REPORT, 0),
            ]
        );
    }

    #[test]
    fn swipes_move_between_down_and_up_and_keys_press_and_release() {
        let pts = line((0, 0), (100, 50), 4);
        assert_eq!(pts, [(0, 0), (25, 12), (50, 25), (75, 37), (100, 50)]);
        // Down at the origin holds nothing new but the contact: 3 events; 4 moves of both
        // axes, 3 events each; up, 3.
        assert_eq!(
            Slot::default().stroke(&pts, 1).len(),
            (3 + 4 * 3 + 3) * EVENT_SIZE
        );
        assert!(Slot::default().stroke(&[], 1).is_empty());
        let k = key(KEY_BACK);
        assert_eq!(k.len(), 4 * EVENT_SIZE);
        assert_eq!(u16::from_ne_bytes([k[18], k[19]]), KEY_BACK);
        let mut sink: Vec<u8> = Vec::new();
        sink.send(&k).unwrap();
        assert_eq!(sink, k);
    }
}
