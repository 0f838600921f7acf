//! Named weights and where they come from: the [`StateDict`] a network takes its tensors from
//! ([`state_dict`]), the `.pth` and `.safetensors` formats that fill and write one ([`pth`],
//! [`safetensors`], recognised by content in `files`), and seeded random or 2-D → 3-D inflated
//! weights (`source`). Nothing here depends on the kernels, layers or models.

mod files;
pub mod pth;
pub mod safetensors;
pub(crate) mod source;
pub mod state_dict;

pub use state_dict::StateDict;
