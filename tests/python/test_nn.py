"""kiln.nn and kiln.optim from Python: modules register what is assigned to them, the
library's layers share their tensors with C++, training lowers a loss eagerly and compiled."""
import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 1)
        self.scale = nn.Parameter(kiln.ones(1))
        self.register_buffer("calls", kiln.zeros(1))

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x))) * self.scale


def test_modules_register_parameters_buffers_and_children():
    model = TwoLayer()
    names = [n for n, _ in model.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [n for n, _ in model.named_buffers()] == ["calls"]
    assert [n for n, _ in model.named_children()] == ["fc1", "fc2"]
    assert model.fc1.weight.shape == (16, 4) and isinstance(model.fc1.weight, nn.Parameter)
    assert sum(p.numel() for p in model.parameters()) == 4 * 16 + 16 + 16 + 1 + 1
    assert set(model.state_dict()) == set(names) | {"calls"}
    assert model.training and not model.eval().fc1.training
    assert "Linear(in_features=4, out_features=16, bias=True)" in repr(model)


def test_gradients_of_a_cpp_layer_land_on_its_python_parameters():
    layer = nn.Linear(3, 2)
    x = kiln.randn(5, 3)
    layer(x).sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(),
                               np.tile(x.numpy().sum(0), (2, 1)), rtol=1e-5)
    assert layer.bias.grad.tolist() == [5.0, 5.0]


def test_state_dict_round_trips_through_safetensors(tmp_path):
    a, b = TwoLayer(), TwoLayer()
    path = str(tmp_path / "model.safetensors")
    kiln.save_file(dict(a.state_dict()), path)
    b.load_state_dict(kiln.load_file(path))
    x = kiln.randn(3, 4)
    assert kiln.equal(a(x), b(x))
    with pytest.raises(kiln.Error, match="missing keys"):
        b.load_state_dict({})


def test_functional_layers_match_numpy():
    x = kiln.randn(2, 3, 8, 8)
    w = kiln.randn(4, 3, 3, 3)
    y = F.conv2d(x, w, padding=1)
    assert y.shape == (2, 4, 8, 8)
    assert F.max_pool2d(y, 2).shape == (2, 4, 4, 4)
    assert F.adaptive_avg_pool2d(y, 1).shape == (2, 4, 1, 1)
    logits, target = kiln.randn(6, 5), kiln.tensor([0, 1, 2, 3, 4, 0])
    p = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum(1, keepdims=True)
    expected = -np.log(p[np.arange(6), target.numpy()]).mean()
    assert abs(F.cross_entropy(logits, target).item() - expected) < 1e-5
    with pytest.raises(kiln.NotImplementedError, match="class weights"):
        F.cross_entropy(logits, target, kiln.ones(5))
    assert F.one_hot(kiln.tensor([0, 2])).tolist() == [[1, 0, 0], [0, 0, 1]]


@pytest.mark.parametrize("compiled", [False, True])
def test_a_cnn_trains_eagerly_and_compiled(compiled):
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-2)
    x = kiln.randn(16, 1, 8, 8)
    y = (x.mean((1, 2, 3)) > 0).long()

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    run = kiln.compile(step) if compiled else step
    losses = [run().item() for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0]


def test_optimizer_param_groups_set_the_learning_rate():
    w = nn.Parameter(kiln.ones(2))
    opt = kiln.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()
    opt.step()
    assert w.tolist() == [0.0, 0.0]
    opt.zero_grad()
    opt.param_groups[0]["lr"] = 0.25
    with kiln.no_grad():
        w.fill_(1.0)
    (w * w).sum().backward()
    opt.step()
    assert w.tolist() == [0.5, 0.5]


def test_parameter_groups_take_their_own_options_as_torch():
    # Weight decay on the weight only and a larger lr for the bias: the same steps as one
    # optimizer per group, and the first step as the formula writes it.
    kiln.manual_seed(3)
    x = kiln.randn(8, 4)

    def make():
        kiln.manual_seed(4)
        return nn.Parameter(kiln.randn(4, 2)), nn.Parameter(kiln.randn(2))

    w, b = make()
    opt = kiln.optim.SGD([{"params": [w], "weight_decay": 0.1}, {"params": b, "lr": 0.5}],
                         lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0]
    w2, b2 = make()
    apart = [kiln.optim.SGD([w2], lr=0.1, momentum=0.9, weight_decay=0.1),
             kiln.optim.SGD([b2], lr=0.5, momentum=0.9)]
    w0, b0 = w.detach().clone(), b.detach().clone()
    for step in range(3):
        for params, optimizers in (((w, b), [opt]), ((w2, b2), apart)):
            ((x @ params[0] + params[1]).tanh() ** 2).sum().backward()
            if step == 0 and params[0] is w:
                gw, gb = w.grad.clone(), b.grad.clone()
            for o in optimizers:
                o.step()
                o.zero_grad()
        if step == 0:
            assert (w - (w0 - 0.1 * (gw + 0.1 * w0))).abs().amax().item() < 1e-6
            assert (b - (b0 - 0.5 * gb)).abs().amax().item() < 1e-6
    assert (w - w2).abs().amax().item() == 0.0 and (b - b2).abs().amax().item() == 0.0

    # A scheduler scales each group's own lr; LambdaLR takes one function per group.
    from kiln.optim import lr_scheduler
    halve = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.step()
    halve.step()
    assert halve.get_last_lr() == pytest.approx([0.05, 0.25])
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.05, 0.25])
    opt = kiln.optim.Adam([{"params": [w]}, {"params": [b], "lr": 1.0}], lr=0.1)
    warm = lr_scheduler.LambdaLR(opt, [lambda e: 1.0, lambda e: (e + 1) / 4])
    warm.step()
    assert warm.get_last_lr() == pytest.approx([0.1, 0.5])
    opt.add_param_group({"params": [nn.Parameter(kiln.zeros(2))], "lr": 0.01})
    assert len(opt.param_groups) == 3 and opt.param_groups[2]["betas"] == (0.9, 0.999)

    with pytest.raises(ValueError, match="more than one parameter group"):
        kiln.optim.SGD([{"params": [w]}, {"params": [w, b]}], lr=0.1)
    with pytest.raises(ValueError, match="one per parameter group"):
        lr_scheduler.LambdaLR(opt, [lambda e: 1.0])
    # Options other than lr / momentum / betas are fixed: changing one is an error, not ignored.
    with pytest.raises(NotImplementedError, match="'weight_decay' is fixed"):
        opt.param_groups[0]["weight_decay"] = 0.5


def test_lstm_returns_output_and_state_as_torch():
    lstm = nn.LSTM(3, 5, batch_first=True)
    out, (h, c) = lstm(kiln.randn(2, 7, 3))
    assert out.shape == (2, 7, 5) and h.shape == (1, 2, 5) and c.shape == (1, 2, 5)
    assert [n for n, _ in lstm.named_parameters()] == [
        "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]


def test_functional_conv_takes_padding_as_sizes_or_as_a_name():
    x, w = kiln.randn(1, 2, 7, 7), kiln.randn(3, 2, 3, 3)
    assert F.conv2d(x, w, padding="same").shape == (1, 3, 7, 7)
    assert F.conv2d(x, w, padding="valid").shape == (1, 3, 5, 5)
    assert F.conv2d(x, w, None, 1, (1, 1)).shape == (1, 3, 7, 7)
    with pytest.raises(TypeError, match="none of its forms"):
        F.conv2d(x, w, padding=1.5)
    with pytest.raises(kiln.ValueError, match="same"):
        F.conv2d(x, w, padding="full")


def test_max_pool_indices_and_avg_pool_divisor_override_as_torch():
    x = kiln.tensor([[[[1.0, 5.0, 2.0, 0.0],
                       [3.0, 4.0, 9.0, 1.0],
                       [0.0, 2.0, 1.0, 1.0],
                       [7.0, 1.0, 3.0, 8.0]]]], requires_grad=True)
    values, indices = F.max_pool2d(x, 2, return_indices=True)
    assert values.tolist() == [[[[5.0, 9.0], [7.0, 8.0]]]]
    assert indices.tolist() == [[[[1, 6], [12, 15]]]]  # flat positions in the 4x4 plane
    values.sum().backward()
    assert x.grad.flatten().tolist() == [0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1]
    module_values, module_indices = nn.MaxPool2d(2, return_indices=True)(x)
    assert kiln.equal(module_values, values) and kiln.equal(module_indices, indices)
    # adaptive to (2, 1): rows [0, 2) and [2, 4), every column
    values, indices = F.adaptive_max_pool2d(x, (2, 1), return_indices=True)
    assert values.tolist() == [[[[9.0], [8.0]]]] and indices.tolist() == [[[[6], [15]]]]
    module_values, module_indices = nn.AdaptiveMaxPool2d((2, 1), return_indices=True)(x)
    assert kiln.equal(module_values, values) and kiln.equal(module_indices, indices)
    assert F.avg_pool2d(x, 2, divisor_override=2).tolist() == [[[[6.5, 6.0], [5.0, 6.5]]]]
    assert nn.AvgPool2d(2, divisor_override=2)(x).tolist() == [[[[6.5, 6.0], [5.0, 6.5]]]]


def test_pad_modes_and_conv_padding_mode():
    x = kiln.tensor([[[1.0, 2.0, 3.0, 4.0]]])
    assert F.pad(x, (2, 1), mode="reflect").tolist() == [[[3.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0]]]
    assert F.pad(x, (1, 2), mode="replicate").tolist() == [[[1.0, 1.0, 2.0, 3.0, 4.0, 4.0, 4.0]]]
    assert F.pad(x, (1, 1), mode="circular").tolist() == [[[4.0, 1.0, 2.0, 3.0, 4.0, 1.0]]]
    assert F.pad(x, (1, 0), value=9).tolist() == [[[9.0, 1.0, 2.0, 3.0, 4.0]]]
    with pytest.raises(ValueError, match="smaller than its dim"):
        F.pad(x, (4, 0), mode="reflect")
    conv = nn.Conv1d(1, 1, 3, padding=1, padding_mode="circular", bias=False)
    expected = F.conv1d(F.pad(x, (1, 1), mode="circular"), conv.weight)
    assert kiln.equal(conv(x), expected)
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv1d(1, 1, 3, padding_mode="mirror")


def test_attention_and_transformer_modules_as_torch():
    kiln.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, kdim=4, vdim=6, add_bias_kv=True, batch_first=True)
    names = [n for n, _ in mha.named_parameters()]
    assert names == ["q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                     "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"]
    q, k, v = kiln.randn(3, 5, 8), kiln.randn(3, 7, 4), kiln.randn(3, 7, 6)
    out, weights = mha(q, k, v)
    assert out.shape == (3, 5, 8) and weights.shape == (3, 5, 8)  # 7 keys + bias_k
    fused, none = mha(q, k, v, need_weights=False)
    assert none is None and (fused - out).abs().amax().item() < 1e-5

    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
    state = encoder.state_dict()
    for name, value in layer.state_dict().items():  # every layer starts as the one given
        assert kiln.equal(state[f"layers.0.{name}"], value)
        assert kiln.equal(state[f"layers.1.{name}"], value)
    assert "norm.weight" in state
    src, tgt = kiln.randn(6, 2, 8), kiln.randn(4, 2, 8)
    assert encoder(src).shape == (6, 2, 8)

    model = nn.Transformer(8, 2, num_encoder_layers=1, num_decoder_layers=2,
                           dim_feedforward=16, dropout=0.0)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    assert mask[0, 1].item() == float("-inf") and mask[1, 0].item() == 0.0
    y = model(src, tgt, tgt_mask=mask)
    assert y.shape == (4, 2, 8)
    decoded = model.decoder(tgt, model.encoder(src), tgt_mask=mask)
    assert (decoded - y).abs().amax().item() == 0.0
    y.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_lr_schedulers_as_torch():
    from kiln.optim import lr_scheduler
    w = nn.Parameter(kiln.zeros(3))
    opt = kiln.optim.SGD([w], lr=0.1, momentum=0.9)
    step = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        step.step()
    assert lrs == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025])
    assert step.get_last_lr() == pytest.approx([0.025]) and step.last_epoch == 5  # epoch 5

    opt = kiln.optim.SGD([w], lr=1.0)
    warm = lr_scheduler.LambdaLR(opt, lambda epoch: min(1.0, (epoch + 1) / 4))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)
    warm.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5)

    opt = kiln.optim.SGD([w], lr=0.1, momentum=0.9)
    cycle = lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10)
    assert opt.param_groups[0]["lr"] == pytest.approx(1.0 / 25)  # max_lr / div_factor
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.95)
    # PyTorch 2.15's values for these arguments (recorded): the peak at step 2, then annealing.
    expected = [(0.52, 0.9), (1.0, 0.85), (0.9504846320134737, 0.854951556604879)]
    for lr, momentum in expected:
        cycle.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(lr, rel=1e-12)
        assert opt.param_groups[0]["momentum"] == pytest.approx(momentum, rel=1e-12)

    opt = kiln.optim.SGD([w], lr=0.1)
    plateau = lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
    for metric in (1.0, 0.5, 0.6, 0.7):
        plateau.step(metric)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    assert plateau.get_last_lr() == pytest.approx([0.05])
