//! Small widgets the editors share: choice boxes over the configs' own enums, and numeric fields
//! that commit a typed value on Enter or when focus leaves (never per keystroke) and say so when a
//! value was brought into range.

use std::ops::RangeInclusive;

use egui::{Color32, ComboBox, DragValue, Rect, Response, Ui};

/// The colour of errors and refusals, everywhere in the window.
pub const ERROR_COLOR: Color32 = Color32::from_rgb(230, 70, 70);

/// A choice among values of `T` (the config's own type, e.g. `Padding`); returns whether it changed.
pub fn combo<T: PartialEq + Clone>(
    ui: &mut Ui,
    label: &str,
    value: &mut T,
    options: &[(T, &str)],
) -> bool {
    let current = options
        .iter()
        .find(|(v, _)| v == value)
        .map(|(_, n)| *n)
        .unwrap_or("?");
    let mut changed = false;
    ComboBox::from_label(label)
        .selected_text(current)
        .show_ui(ui, |ui| {
            for (v, name) in options {
                changed |= ui.selectable_value(value, v.clone(), *name).changed();
            }
        });
    changed
}

/// A kind's name and the default value of that kind.
pub type Kind<'a, T> = (&'a str, fn() -> T);

/// Which variant of a config enum is used (`kinds`: a name and the default value of each variant).
/// Choosing another kind sets the values that kind last had here (its default the first time), so
/// trying another denoiser and coming back keeps what was set; editing its fields is left to the
/// caller. `same_kind` tells whether two values are the same variant.
pub fn kind_combo<T: Clone + Send + Sync + 'static>(
    ui: &mut Ui,
    label: &str,
    value: &mut T,
    kinds: &[Kind<'_, T>],
    same_kind: fn(&T, &T) -> bool,
) -> bool {
    let current = kinds.iter().position(|(_, make)| same_kind(&make(), value));
    let memory = ui.make_persistent_id(("kind values", label));
    let mut chosen = None;
    ComboBox::from_label(label)
        .selected_text(current.map(|i| kinds[i].0).unwrap_or("?"))
        .show_ui(ui, |ui| {
            for (i, (name, _)) in kinds.iter().enumerate() {
                if ui.selectable_label(current == Some(i), *name).clicked() {
                    chosen = Some(i);
                }
            }
        });
    match chosen {
        Some(i) if Some(i) != current => {
            let last = ui.data_mut(|d| {
                if let Some(c) = current {
                    d.insert_temp(memory.with(c), value.clone());
                }
                d.get_temp::<T>(memory.with(i))
            });
            *value = last.unwrap_or_else(kinds[i].1);
            true
        }
        _ => false,
    }
}

/// Whether two values are the same enum variant.
pub fn same_variant<T>(a: &T, b: &T) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Whether two optional values are both absent or the same enum variant.
pub fn same_optional_variant<T>(a: &Option<T>, b: &Option<T>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same_variant(a, b),
        _ => false,
    }
}

/// A number a numeric field can hold.
pub trait Number: egui::emath::Numeric + PartialOrd + std::fmt::Display {}
impl<T: egui::emath::Numeric + PartialOrd + std::fmt::Display> Number for T {}

/// What was typed into a field and brought into range, shown beside it until the next edit.
#[derive(Clone)]
struct Clamped(String);

/// A labelled numeric field (found by its label in tests and by screen readers). Dragging changes
/// the value live; typed text is applied on Enter or focus loss, so a value on its way to "128" is
/// never "1" or "12". A typed value outside `range` is brought into it and the field says so.
pub fn number<T: Number>(
    ui: &mut Ui,
    label: &str,
    value: &mut T,
    speed: f64,
    range: RangeInclusive<T>,
) -> bool {
    ui.horizontal(|ui| {
        let l = ui.label(label);
        let id = ui.next_auto_id();
        let (lo, hi) = (range.start().to_f64(), range.end().to_f64());
        let typed: std::cell::Cell<Option<f64>> = std::cell::Cell::new(None);
        let response: Response = ui
            .add(
                DragValue::new(value)
                    .speed(speed)
                    .range(range)
                    .update_while_editing(false)
                    .custom_parser(|text| {
                        let v = text.trim().parse::<f64>().ok();
                        typed.set(v);
                        v
                    }),
            )
            .labelled_by(l.id);
        let note_id = id.with("clamped");
        if response.changed() {
            let note = typed.get().filter(|v| *v < lo || *v > hi).map(|v| {
                Clamped(format!(
                    "{v} is out of range: set to {}",
                    if v < lo { range_end(lo) } else { range_end(hi) }
                ))
            });
            ui.data_mut(|d| match note {
                Some(n) => {
                    d.insert_temp(note_id, n);
                }
                None => d.remove::<Clamped>(note_id),
            });
        }
        if let Some(Clamped(note)) = ui.data(|d| d.get_temp::<Clamped>(note_id)) {
            ui.colored_label(ui.visuals().warn_fg_color, note);
        }
        response.changed()
    })
    .inner
}

fn range_end(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A labelled single-line text field whose text is applied on Enter or focus loss; returns the
/// text then.
pub fn committed_text(ui: &mut Ui, label: &str, current: &str) -> Option<String> {
    ui.horizontal(|ui| {
        let l = ui.label(label);
        let id = ui.next_auto_id().with(label);
        let mut text = ui
            .data(|d| d.get_temp::<String>(id))
            .unwrap_or_else(|| current.to_string());
        let r = ui.text_edit_singleline(&mut text).labelled_by(l.id);
        if r.has_focus() || r.changed() {
            ui.data_mut(|d| d.insert_temp(id, text.clone()));
        }
        if r.lost_focus() {
            ui.data_mut(|d| d.remove::<String>(id));
            return (text != current).then_some(text);
        }
        if !r.has_focus() {
            ui.data_mut(|d| d.remove::<String>(id));
        }
        None
    })
    .inner
}

/// A problem shown under the field it concerns.
pub fn field_error(ui: &mut Ui, text: &str) {
    ui.colored_label(ERROR_COLOR, text);
}

/// Adds `widget` centred over `rect`, over something already drawn (a label over an image).
/// Unlike `Ui::put` the layout's cursor stays where it was: `put` moves it to below `rect`, which
/// pulled what came next (a colour bar) up over the image.
pub fn overlay(ui: &mut Ui, rect: Rect, widget: impl egui::Widget) -> Response {
    ui.new_child(egui::UiBuilder::new().max_rect(rect).layout(
        egui::Layout::centered_and_justified(egui::Direction::TopDown),
    ))
    .add(widget)
}
