//! Telling a newer peer from garbage. postcard writes an enum variant as its index, and
//! serde's derived decoders turn an index they do not know into a custom error that postcard
//! keeps without its message: a request with a new kind nested anywhere (a new probe in a
//! batch, a new action, a new setup step) would look exactly like corrupt bytes.
//!
//! [`deserialize`] runs a decoder through a thin wrapper that sees every enum on the way
//! down, reads each variant index before the derived code does, and records the first index
//! beyond the enum's known variants. Decoding stops at that error, so a recorded index is
//! always the cause of the failure; every other failure is garbage.

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};
use std::cell::Cell;
use std::fmt;

/// An enum variant index this build does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnknownVariant {
    /// The Rust name of the enum ("Probe", "Action").
    pub(crate) kind: &'static str,
    /// The index received.
    pub(crate) index: u32,
    /// How many variants this build knows.
    pub(crate) known: u32,
}

type Seen = Cell<Option<UnknownVariant>>;

/// Deserializes a `T` from `de`. On failure, also says which unknown variant index stopped
/// the decoder, if that is what did.
pub(crate) fn deserialize<'de, T, D>(de: D) -> Result<T, (D::Error, Option<UnknownVariant>)>
where
    T: de::Deserialize<'de>,
    D: Deserializer<'de>,
{
    let seen = Cell::new(None);
    T::deserialize(Watch {
        inner: de,
        seen: &seen,
    })
    .map_err(|e| (e, seen.get()))
}

/// A deserializer that wraps every nested deserializer, so enums at any depth are seen.
struct Watch<'s, D> {
    inner: D,
    seen: &'s Seen,
}

/// A visitor that wraps what the format hands it (sequences, maps, enums, inner values).
struct Wrap<'s, V> {
    inner: V,
    seen: &'s Seen,
    /// For enums: the enum's name and number of variants.
    enum_info: Option<(&'static str, usize)>,
}

impl<'s, V> Wrap<'s, V> {
    fn new(inner: V, seen: &'s Seen) -> Self {
        Self {
            inner,
            seen,
            enum_info: None,
        }
    }
}

/// Forwards methods whose visitors only ever receive plain values.
macro_rules! leaves {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method(visitor)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Watch<'_, D> {
    type Error = D::Error;

    // postcard is not self-describing and refuses `any`; other formats' `any` would bypass
    // the watch, which only costs them the unknown-variant diagnosis.
    leaves! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_unit deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_option(Wrap::new(visitor, self.seen))
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_newtype_struct(name, Wrap::new(visitor, self.seen))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_seq(Wrap::new(visitor, self.seen))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_tuple(len, Wrap::new(visitor, self.seen))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_tuple_struct(name, len, Wrap::new(visitor, self.seen))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(Wrap::new(visitor, self.seen))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_struct(name, fields, Wrap::new(visitor, self.seen))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let wrap = Wrap {
            inner: visitor,
            seen: self.seen,
            enum_info: Some((name, variants.len())),
        };
        self.inner.deserialize_enum(name, variants, wrap)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Watch {
            inner: d,
            seen: self.seen,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Watch {
            inner: d,
            seen: self.seen,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(WatchSeq {
            inner: seq,
            seen: self.seen,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(WatchMap {
            inner: map,
            seen: self.seen,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        // An enum reached without `deserialize_enum` has no known variant count: never flag.
        let (kind, known) = self.enum_info.unwrap_or(("enum", usize::MAX));
        self.inner.visit_enum(WatchEnum {
            inner: data,
            seen: self.seen,
            kind,
            known: u32::try_from(known).unwrap_or(u32::MAX),
        })
    }
}

/// A seed whose deserializer is watched.
struct WatchSeed<'s, S> {
    inner: S,
    seen: &'s Seen,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for WatchSeed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Watch {
            inner: d,
            seen: self.seen,
        })
    }
}

struct WatchSeq<'s, A> {
    inner: A,
    seen: &'s Seen,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for WatchSeq<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(WatchSeed {
            inner: seed,
            seen: self.seen,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

struct WatchMap<'s, A> {
    inner: A,
    seen: &'s Seen,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for WatchMap<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(WatchSeed {
            inner: seed,
            seen: self.seen,
        })
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.next_value_seed(WatchSeed {
            inner: seed,
            seen: self.seen,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

struct WatchEnum<'s, A> {
    inner: A,
    seen: &'s Seen,
    kind: &'static str,
    known: u32,
}

impl<'de, 's, A: EnumAccess<'de>> EnumAccess<'de> for WatchEnum<'s, A> {
    type Error = A::Error;
    type Variant = WatchVariant<'s, A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let index = VariantIndex {
            inner: seed,
            seen: self.seen,
            kind: self.kind,
            known: self.known,
        };
        let (value, variant) = self.inner.variant_seed(index)?;
        Ok((
            value,
            WatchVariant {
                inner: variant,
                seen: self.seen,
            },
        ))
    }
}

/// Reads the variant index (postcard hands it over as a `u32`), records it if it is beyond
/// the known variants, and otherwise gives it to the derived identifier decoder.
struct VariantIndex<'s, S> {
    inner: S,
    seen: &'s Seen,
    kind: &'static str,
    known: u32,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for VariantIndex<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        let index = <u32 as de::Deserialize>::deserialize(d)?;
        if index >= self.known {
            self.seen.set(Some(UnknownVariant {
                kind: self.kind,
                index,
                known: self.known,
            }));
            return Err(de::Error::custom(format_args!(
                "unknown {} variant {index}",
                self.kind
            )));
        }
        self.inner
            .deserialize(IntoDeserializer::<D::Error>::into_deserializer(index))
    }
}

struct WatchVariant<'s, A> {
    inner: A,
    seen: &'s Seen,
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for WatchVariant<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.newtype_variant_seed(WatchSeed {
            inner: seed,
            seen: self.seen,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner.tuple_variant(len, Wrap::new(visitor, self.seen))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.inner
            .struct_variant(fields, Wrap::new(visitor, self.seen))
    }
}
