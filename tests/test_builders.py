"""A user's network builder: imported by name, called with its genes, checked by a dry forward pass."""
import itertools
import sys

import pytest
import torch

from ensemble.builders import BuilderError, add_model_path, check_network, import_builder, network_from_settings

USER_MODULE = '''
import torch
from torch import nn

def build(genes, sample_shape, outputs):
    channels = genes["channels"]
    return nn.Sequential(nn.Conv3d(sample_shape[0], channels, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(channels, outputs))

def wrong_outputs(genes, sample_shape, outputs):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(sample_shape).prod()), outputs + 1))

def raises(genes, sample_shape, outputs):
    raise ValueError(f"blocks must be even, got {genes['blocks']}")

def not_a_module(genes, sample_shape, outputs):
    return "a string"

def breaks_forward(genes, sample_shape, outputs):
    return nn.Linear(7, outputs)

NOT_CALLABLE = 3
'''
_names = itertools.count()


@pytest.fixture
def user_module(tmp_path):
    """A module of builders in its own folder, importable under a fresh name; sys.path restored after."""
    name = f"user_nets_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    saved = list(sys.path)
    add_model_path(str(tmp_path))
    yield name
    sys.path[:] = saved
    sys.modules.pop(name, None)


def test_a_builder_is_imported_by_name_and_called_with_its_genes_shape_and_outputs(user_module):
    network = {"builder": f"{user_module}:build", "genes": {"channels": 5}}
    model = network_from_settings(network, (2, 4, 6, 6), 3)
    assert model(torch.zeros(7, 2, 4, 6, 6)).shape == (7, 3) and model[0].out_channels == 5
    check_network(network, (2, 4, 6, 6), 3)  # passes


def test_built_in_families_go_through_the_same_seam():
    model = network_from_settings({"family": "cnn", "depth": 2, "width": 8}, (1, 8, 8), 4)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 4)


@pytest.mark.parametrize("function, genes, message", [
    ("wrong_outputs", {}, "gave output (1, 4); the problem needs (1, 3)"),
    ("raises", {"blocks": 3}, "raised ValueError: blocks must be even, got 3"),
    ("not_a_module", {}, "returned a str, not a torch.nn.Module"),
    ("breaks_forward", {}, "a forward pass on one sample of shape (2, 4, 6, 6) raised RuntimeError"),
    ("NOT_CALLABLE", {}, "'NOT_CALLABLE' is a int, not a function"),
    ("missing", {}, "has no 'missing'"),
])
def test_a_bad_builder_is_one_line_naming_it_and_the_problem(user_module, function, genes, message):
    with pytest.raises(BuilderError) as caught:
        check_network({"builder": f"{user_module}:{function}", "genes": genes}, (2, 4, 6, 6), 3)
    text = str(caught.value)
    assert message in text and f"{user_module}" in text and "\n" not in text


@pytest.mark.parametrize("reference, message", [
    ("no_such_module_anywhere:build", "no module named 'no_such_module_anywhere' (install it, or give its folder as model.path"),
    ("mynets.volumes", "expected 'module:function'"),
    ("../evil:build", "expected 'module:function'"),
    ("os:path:join", "expected 'module:function'"),
])
def test_a_bad_reference_is_one_line(reference, message):
    with pytest.raises(BuilderError, match="model builder") as caught:
        import_builder(reference)
    assert message in str(caught.value)


def test_a_module_that_raises_on_import_is_one_line(tmp_path):
    (tmp_path / "broken_on_import.py").write_text("raise ImportError('needs a GPU library')\n")
    saved = list(sys.path)
    try:
        add_model_path(str(tmp_path))
        with pytest.raises(BuilderError, match="importing broken_on_import raised ImportError: needs a GPU library"):
            import_builder("broken_on_import:build")
    finally:
        sys.path[:] = saved
        sys.modules.pop("broken_on_import", None)


def test_a_model_path_must_be_a_folder(tmp_path):
    with pytest.raises(BuilderError, match="no such directory"):
        add_model_path(str(tmp_path / "nowhere"))
