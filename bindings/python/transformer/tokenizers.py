"""Tokenizers: character-level, and (since 1.2) GPT-2's byte-level BPE,
BERT's WordPiece, SentencePiece and Marian's, with Hugging Face's method
names.

    tok = transformer.load_tokenizer("path/to/gpt2")   # a directory or file
    tok.encode("Hello world")                           # [15496, 995]
    tok.decode([15496, 995])                            # 'Hello world'
    batch = tok(["a", "b c"], padding=True)             # input_ids, attention_mask
"""

import os

import numpy as np

from . import _lowlevel as _ll
from ._core import HandleOwner, _Handle, as_ids, fspath
from ._errors import InvalidArgumentError, NotFoundError

__all__ = ["Tokenizer", "load_tokenizer"]

_KINDS = {
    _ll.TFM_TOKENIZER_CHAR: "char",
    _ll.TFM_TOKENIZER_BYTE_BPE: "byte_bpe",
    _ll.TFM_TOKENIZER_WORDPIECE: "wordpiece",
    _ll.TFM_TOKENIZER_SENTENCEPIECE: "sentencepiece",
    _ll.TFM_TOKENIZER_MARIAN: "marian",
}
_ROLES = ("bos", "eos", "unk", "pad", "cls", "sep", "mask")


def load_tokenizer(path):
    """Tokenizer.load(path): a model file, a tokenizer.json, GPT-2's
    encoder.json / vocab.json (merges beside it), BERT's vocab.txt, a
    SentencePiece .model / .spm, or a checkpoint directory (Marian's:
    vocab.json, source.spm, target.spm)."""
    return Tokenizer.load(path)


def _char_offsets(text):
    """Byte offset -> character offset of str text, as a numpy array of
    len(utf-8 bytes) + 1 entries."""
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    lead = (data & 0xC0) != 0x80
    return np.concatenate(([0], np.cumsum(lead))).astype(np.int64)


class Tokenizer(HandleOwner):
    """A tokenizer of any kind (tokenizer.h).

    ``Tokenizer(vocab)``: character-level, vocab the string of the tokens in
    id order (no character twice).  ``Tokenizer.load(path)`` /
    ``Tokenizer.from_pretrained(path)`` / ``load_tokenizer(path)``: a model
    file's tokenizer, a tokenizer.json, GPT-2's files, or a directory.

    Hugging Face's names: encode(text, text_pair=None,
    add_special_tokens=True) -> ids; decode(ids, skip_special_tokens=False)
    -> str; convert_ids_to_tokens, convert_tokens_to_ids; tok(texts, ...)
    -> {"input_ids", "attention_mask", ...} for one text or a padded batch;
    bos_token_id, eos_token_id, ... (None when the tokenizer has none);
    len(tok) is the vocabulary size.  Special tokens written in the text
    ("<|endoftext|>") become their ids, as in Hugging Face tokenizers.
    """

    def __init__(self, vocab):
        if not isinstance(vocab, str):
            raise TypeError(f"vocab must be a str, not {type(vocab).__name__}")
        if "\0" in vocab:
            raise InvalidArgumentError("vocab must not contain NUL")
        self._handle = _Handle(_ll.tfm_tokenizer_create(vocab),
                               _ll.tfm_tokenizer_free, "tokenizer")
        self._path = None
        self._pad = None

    @classmethod
    def load(cls, path):
        """The tokenizer of path: a model file's metadata ("tfm.tokenizer":
        "char"), a tokenizer.json, encoder.json + vocab.bpe, vocab.json +
        merges.txt, BERT's vocab.txt, a SentencePiece .model, or a directory
        holding one of those or Marian's vocab.json, source.spm and
        target.spm.  FormatError,
        UnsupportedError or IOError when it cannot be read."""
        self = cls.__new__(cls)
        path = fspath(path)
        self._handle = _Handle(_ll.tfm_tokenizer_load(path),
                               _ll.tfm_tokenizer_free, "tokenizer")
        self._path = os.path.abspath(path)
        self._pad = None
        return self

    from_pretrained = load

    def __reduce__(self):
        """pickle and copy.deepcopy: rebuilt from the vocabulary
        (character-level) or loaded again from the same path."""
        if self.kind == "char" and self._path is None:
            return (Tokenizer, (self.vocab,))
        return (Tokenizer.load, (self._path,))

    # ---- what it is ----------------------------------------------------

    @property
    def kind(self):
        """"char", "byte_bpe", "wordpiece", "sentencepiece" or "marian"
        (Marian's source.spm + target.spm + vocab.json)."""
        k = self._call(_ll.tfm_tokenizer_get_kind)
        return _KINDS.get(k, f"kind {k}")

    @property
    def vocab_size(self):
        """Number of tokens."""
        return self._call(_ll.tfm_tokenizer_vocab_size)

    def __len__(self):
        return self.vocab_size

    @property
    def vocab(self):
        """Character-level: the vocabulary string (token i is vocab[i])."""
        if self.kind != "char":
            raise AttributeError("vocab is the character-level vocabulary "
                                 "string; use get_vocab()")
        return self.decode(np.arange(self.vocab_size, dtype=np.int32))

    def get_vocab(self):
        """{token string: id} for every id."""
        return {self._token(i): i for i in range(self.vocab_size)}

    def _role(self, role):
        try:
            return self._call(_ll.tfm_tokenizer_special_id, role)
        except NotFoundError:
            return None

    def _role_property(role, what):
        return property(lambda self: self._role(role),
                        doc=f"The id of the {what} token "
                            f"(tfm_tokenizer_special_id \"{role}\"), or "
                            "None when the tokenizer has none.")

    bos_token_id = _role_property("bos", "beginning-of-sequence")
    eos_token_id = _role_property("eos", "end-of-sequence")
    unk_token_id = _role_property("unk", "unknown")
    cls_token_id = _role_property("cls", "classifier")
    sep_token_id = _role_property("sep", "separator")
    mask_token_id = _role_property("mask", "mask")
    del _role_property

    @property
    def pad_token_id(self):
        """The padding id: the tokenizer's pad token, or what was set here
        (GPT-2 has none; Hugging Face users set it to eos_token_id)."""
        return self._pad if self._pad is not None else self._role("pad")

    @pad_token_id.setter
    def pad_token_id(self, value):
        self._pad = None if value is None else int(value)

    @property
    def all_special_ids(self):
        """Ids of the special tokens."""
        with self._use() as ptr:
            return [i for i in range(self.vocab_size)
                    if _ll.tfm_tokenizer_is_special(ptr, i)]

    # ---- tokens --------------------------------------------------------

    def _token(self, i):
        if self.kind == "char":
            return self.decode([i])
        return self._call(_ll.tfmpy_tokenizer_id_to_token, int(i))

    def convert_ids_to_tokens(self, ids, skip_special_tokens=False):
        """An id -> its token string; a list of ids -> a list of them."""
        if isinstance(ids, (int, np.integer)):
            return self._token(int(ids))
        ids = as_ids(ids, "ids").reshape(-1)
        with self._use() as ptr:
            return [self._token(int(i)) for i in ids
                    if not (skip_special_tokens and
                            _ll.tfm_tokenizer_is_special(ptr, int(i)))]

    def convert_tokens_to_ids(self, tokens):
        """A token string -> its id (the unk id, or NotFoundError, when it
        is not in the vocabulary); a list -> a list."""
        if isinstance(tokens, str):
            try:
                return self._call(_ll.tfm_tokenizer_token_to_id, tokens)
            except NotFoundError:
                if self.unk_token_id is None:
                    raise
                return self.unk_token_id
        return [self.convert_tokens_to_ids(t) for t in tokens]

    # ---- encode, decode ------------------------------------------------

    def _encode(self, text, text_pair, add_special_tokens):
        for name, t in (("text", text), ("text_pair", text_pair)):
            if t is not None and not isinstance(t, (str, bytes)):
                raise TypeError(f"{name} must be a str, not "
                                f"{type(t).__name__}")
        flags = _ll.TFM_ENCODE_SPLIT_SPECIAL
        if add_special_tokens:
            flags |= _ll.TFM_ENCODE_ADD_SPECIAL
        return self._call(_ll.tfmpy_tokenizer_encode_v2, text, text_pair, flags)

    def encode(self, text, text_pair=None, add_special_tokens=True):
        """str (or UTF-8 bytes), with an optional second text -> list of
        ids."""
        return self._encode(text, text_pair, add_special_tokens)[0].tolist()

    def decode(self, ids, skip_special_tokens=False):
        """Token ids (list or 1-D array) -> str.  Bytes that are not UTF-8
        (a byte-level token cut from a character) become U+FFFD, as in
        Hugging Face tokenizers; decode_bytes gives them as they are."""
        with self._use() as ptr:
            ids = as_ids(ids, "ids").reshape(-1)
            if ids.size == 0:
                return ""
            if self.kind == "char":
                return _ll.tfmpy_tokenizer_decode(ptr, ids)
            return self.decode_bytes(ids, skip_special_tokens).decode(
                "utf-8", errors="replace")

    def decode_bytes(self, ids, skip_special_tokens=False):
        """Token ids -> the bytes they stand for."""
        ids = as_ids(ids, "ids").reshape(-1)
        flags = _ll.TFM_DECODE_SKIP_SPECIAL if skip_special_tokens else 0
        return self._call(_ll.tfmpy_tokenizer_decode_v2, ids, flags)

    def batch_decode(self, sequences, skip_special_tokens=False):
        """decode for each sequence."""
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def __call__(self, text, text_pair=None, add_special_tokens=True,
                 padding=False, truncation=False, max_length=None,
                 return_tensors=None, return_token_type_ids=None,
                 return_attention_mask=True, return_offsets_mapping=False):
        """Encodes one text (lists in the result) or a batch of texts (lists
        of lists), with text_pair a second text (or a list of them) framed
        as the model's post-processor does.

        padding: False, True or "longest" (to the longest of the batch), or
        "max_length" (to max_length); pads on the right with pad_token_id
        (ValueError when there is none).  truncation: True cuts each
        sequence to max_length tokens (from the end).  return_tensors="np"
        gives numpy arrays.  Returns a dict: "input_ids", "attention_mask"
        (1 for a token, 0 for padding), "token_type_ids" when asked or for a
        pair, "offset_mapping" (character offsets [begin, end) in the text,
        (0, 0) for added tokens and padding) when asked."""
        single = isinstance(text, (str, bytes))
        texts = [text] if single else list(text)
        if text_pair is None:
            pairs = [None] * len(texts)
        elif isinstance(text_pair, (str, bytes)):
            pairs = [text_pair]
        else:
            pairs = list(text_pair)
        if len(pairs) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
        if padding not in (False, True, "longest", "max_length",
                           "do_not_pad"):
            raise ValueError(f"padding must be False, True, 'longest' or "
                             f"'max_length', not {padding!r}")
        if (padding == "max_length" or truncation) and max_length is None:
            raise ValueError("max_length is needed with truncation or "
                             "padding='max_length'")
        rows = []
        for t, p in zip(texts, pairs):
            ids, types, offs = self._encode(t, p, add_special_tokens)
            if return_offsets_mapping:
                offs = offs.copy()
                for which, src in ((0, t), (1, p)):
                    if isinstance(src, str):
                        sel = types == which
                        offs[sel] = _char_offsets(src)[offs[sel]]
            if truncation and len(ids) > max_length:
                ids, types, offs = (ids[:max_length], types[:max_length],
                                    offs[:max_length])
            rows.append((ids, types, offs))
        width = max((len(r[0]) for r in rows), default=0)
        if padding == "max_length":
            width = max(width, max_length)
        pad = padding in (True, "longest", "max_length")
        if pad and any(len(r[0]) < width for r in rows) and \
                self.pad_token_id is None:
            raise ValueError("this tokenizer has no padding token: set "
                             "tokenizer.pad_token_id (e.g. to "
                             "eos_token_id) to pad")
        out = {"input_ids": [], "attention_mask": []}
        want_types = return_token_type_ids or (
            return_token_type_ids is None and text_pair is not None)
        if want_types:
            out["token_type_ids"] = []
        if return_offsets_mapping:
            out["offset_mapping"] = []
        for ids, types, offs in rows:
            n = len(ids)
            extra = width - n if pad else 0
            out["input_ids"].append(ids.tolist() +
                                    [self.pad_token_id] * extra)
            out["attention_mask"].append([1] * n + [0] * extra)
            if want_types:
                out["token_type_ids"].append(types.tolist() + [0] * extra)
            if return_offsets_mapping:
                out["offset_mapping"].append(
                    [tuple(o) for o in offs.tolist()] + [(0, 0)] * extra)
        if not return_attention_mask:
            del out["attention_mask"]
        if return_tensors == "np":
            out = {k: np.array(v, dtype=np.int64) for k, v in out.items()}
        elif return_tensors is not None:
            raise ValueError("return_tensors must be None or 'np'")
        if single:
            out = {k: v[0] for k, v in out.items()}
        return out

    def __repr__(self):
        if self.closed:
            return "Tokenizer(<closed>)"
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"
