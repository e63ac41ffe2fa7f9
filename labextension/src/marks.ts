/** Findings marked in the cell editors: CodeMirror 6 line decorations, the message on hover. */
import { RangeSetBuilder, StateEffect, StateField } from '@codemirror/state';
import { Decoration, DecorationSet, EditorView } from '@codemirror/view';
import { CodeMirrorEditor } from '@jupyterlab/codemirror';

import { ILineMark } from './logic';

const setMarks = StateEffect.define<ILineMark[]>();

const marksField = StateField.define<DecorationSet>({
  create: () => Decoration.none,
  update(marks, transaction) {
    for (const effect of transaction.effects) {
      if (effect.is(setMarks)) {
        return decorations(transaction.state.doc, effect.value);
      }
    }
    return marks.map(transaction.changes);
  },
  provide: field => EditorView.decorations.from(field)
});

function decorations(doc: EditorView['state']['doc'], marks: ILineMark[]): DecorationSet {
  const builder = new RangeSetBuilder<Decoration>();
  for (const mark of marks) {
    if (mark.line < 1 || mark.line > doc.lines) {
      continue;
    }
    const line = doc.line(mark.line);
    builder.add(
      line.from,
      line.from,
      Decoration.line({ attributes: { class: `npu-mark npu-mark-${mark.severity}`, title: mark.message } })
    );
  }
  return builder.finish();
}

const injected = new WeakSet<CodeMirrorEditor>();

/** Show ``marks`` in ``editor`` (an empty list clears them). */
export function showMarks(editor: CodeMirrorEditor, marks: ILineMark[]): void {
  if (!injected.has(editor)) {
    editor.injectExtension(marksField);
    injected.add(editor);
  }
  editor.editor.dispatch({ effects: setMarks.of(marks) });
}
