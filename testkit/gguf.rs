//! GGUF for tests: small GGUF files written with the position of every field a
//! hostile-input test may want to rewrite. (Random blocks of every format the block ops
//! take are `rlx::gguf::random_blocks` over `rlx::ir::BLOCK_FORMATS`.)

/// A metadata value to write: its GGUF type id and its encoded bytes.
#[derive(Clone, Debug)]
pub struct Meta {
    /// GGUF's value type id.
    pub type_id: u32,
    /// The encoded value.
    pub bytes: Vec<u8>,
}

impl Meta {
    /// A `u32`.
    pub fn u32(v: u32) -> Meta {
        Meta {
            type_id: 4,
            bytes: v.to_le_bytes().to_vec(),
        }
    }

    /// An `f32`.
    pub fn f32(v: f32) -> Meta {
        Meta {
            type_id: 6,
            bytes: v.to_le_bytes().to_vec(),
        }
    }

    /// A bool.
    pub fn bool(v: bool) -> Meta {
        Meta {
            type_id: 7,
            bytes: vec![u8::from(v)],
        }
    }

    /// A string.
    pub fn string(v: &str) -> Meta {
        Meta {
            type_id: 8,
            bytes: string_bytes(v),
        }
    }

    /// An array of values of one type.
    pub fn array(items: &[Meta]) -> Meta {
        let type_id = items.first().map_or(4, |m| m.type_id);
        let mut bytes = type_id.to_le_bytes().to_vec();
        bytes.extend((items.len() as u64).to_le_bytes());
        for item in items {
            bytes.extend(&item.bytes);
        }
        Meta { type_id: 9, bytes }
    }

    /// A value of another type, by id and little-endian bytes.
    pub fn raw(type_id: u32, bytes: &[u8]) -> Meta {
        Meta {
            type_id,
            bytes: bytes.to_vec(),
        }
    }
}

fn string_bytes(s: &str) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s.as_bytes());
    b
}

/// A tensor to write: GGUF dims (fastest first), GGML type id and its bytes.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Its name.
    pub name: String,
    /// GGUF dims, fastest first.
    pub dims: Vec<u64>,
    /// GGML type id.
    pub type_id: u32,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Byte positions of fields in a written file.
#[derive(Clone, Debug, Default)]
pub struct Fields {
    /// The u32 version.
    pub version: usize,
    /// The u64 tensor count and metadata count.
    pub counts: [usize; 2],
    /// Every u64 string or array length.
    pub lengths: Vec<usize>,
    /// Every u32 metadata value type (and array element type).
    pub value_types: Vec<usize>,
    /// Each tensor's u32 rank.
    pub ranks: Vec<usize>,
    /// Every u64 dim of every tensor.
    pub dims: Vec<usize>,
    /// Each tensor's u32 type.
    pub tensor_types: Vec<usize>,
    /// Each tensor's u64 offset.
    pub offsets: Vec<usize>,
    /// Where tensor data starts.
    pub data_start: usize,
}

/// A GGUF v3 file of `metadata` and `tensors` (each tensor's data padded to `alignment`,
/// which is written as `general.alignment` when not 32), and where its fields are.
pub fn write(metadata: &[(&str, Meta)], tensors: &[Tensor], alignment: u64) -> (Vec<u8>, Fields) {
    let mut f = Fields::default();
    let mut out = b"GGUF".to_vec();
    f.version = out.len();
    out.extend(3u32.to_le_bytes());
    f.counts[0] = out.len();
    out.extend((tensors.len() as u64).to_le_bytes());
    f.counts[1] = out.len();
    let mut entries: Vec<(&str, Meta)> = metadata.to_vec();
    if alignment != 32 {
        entries.push(("general.alignment", Meta::u32(alignment as u32)));
    }
    out.extend((entries.len() as u64).to_le_bytes());
    for (key, value) in &entries {
        f.lengths.push(out.len());
        out.extend(string_bytes(key));
        f.value_types.push(out.len());
        out.extend(value.type_id.to_le_bytes());
        if value.type_id == 8 {
            f.lengths.push(out.len());
        }
        if value.type_id == 9 {
            f.value_types.push(out.len());
            f.lengths.push(out.len() + 4);
        }
        out.extend(&value.bytes);
    }
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for t in tensors {
        f.lengths.push(out.len());
        out.extend(string_bytes(&t.name));
        f.ranks.push(out.len());
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            f.dims.push(out.len());
            out.extend(d.to_le_bytes());
        }
        f.tensor_types.push(out.len());
        out.extend(t.type_id.to_le_bytes());
        f.offsets.push(out.len());
        out.extend(offset.to_le_bytes());
        offsets.push(offset);
        offset = (offset + t.data.len() as u64).div_ceil(alignment) * alignment;
    }
    let start = (out.len() as u64).div_ceil(alignment) * alignment;
    out.resize(start as usize, 0);
    f.data_start = out.len();
    for (t, at) in tensors.iter().zip(offsets) {
        out.resize(f.data_start + at as usize, 0);
        out.extend(&t.data);
    }
    (out, f)
}
