"""The package documents itself: help() on every public class and function
shows a real docstring (tools/package-check.sh runs the same check on the
installed package)."""

import inspect
import pydoc

import transformer


def public_objects():
    for name in transformer.__all__:
        obj = getattr(transformer, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield name, obj


def test_every_public_class_function_and_method_has_a_docstring():
    missing = []
    for name, obj in public_objects():
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        for attr, member in inspect.getmembers(obj):
            if attr.startswith("_"):
                continue
            if (inspect.isfunction(member) or isinstance(member, property)) \
                    and not (member.__doc__ or "").strip():
                missing.append(f"{name}.{attr}")
    assert not missing, missing
    assert len(list(public_objects())) > 20


def help_text(obj):
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


def test_help_shows_the_contract():
    mha = help_text(transformer.MultiheadAttention)
    for word in ("torch.nn.MultiheadAttention", "batch_first",
                 "need_weights", "key_padding_mask"):
        assert word in mha, word
    gen = help_text(transformer.Model.generate)
    assert "do_sample" in gen and "greedy" in gen and "42" in gen
    save = help_text(transformer.save_safetensors)
    assert "BF16" in save and "metadata" in save and "fsync" in save
    assert "Transformer building blocks" in help_text(transformer)
