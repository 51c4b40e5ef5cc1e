"""A torch module with the structure and parameter names of the library's
models, for the backward and training tests: token and learned position
embeddings (optionally scaled by sqrt(d_model)); nn.TransformerEncoderLayer
blocks (causal for decoder-only) and a final LayerNorm, or nn.Transformer
for encoder-decoder; a tied or separate head.  Load our model's state_dict
into it (strict=False: a tied model has no lm_head.weight)."""

import math

import torch


class TorchModel(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, V = c["d_model"], c["vocab_size"]
        self.c = c
        self.token_embedding = torch.nn.Embedding(V, d)
        self.position_embedding = torch.nn.Embedding(c["context_length"], d)
        kw = dict(dim_feedforward=c["d_ff"], dropout=0.0, batch_first=True,
                  norm_first=c["norm_first"], activation=c["activation"])
        if c["architecture"] == "encoder_decoder":
            self.transformer = torch.nn.Transformer(
                d, c["n_heads"], c["n_encoder_layers"], c["n_decoder_layers"],
                **kw)
        else:
            self.layers = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(d, c["n_heads"], **kw)
                for _ in range(c["n_layers"]))
            self.norm = torch.nn.LayerNorm(d)
        if not c["tied_embeddings"]:
            self.lm_head = torch.nn.Linear(d, V, bias=False)

    def embed(self, ids):
        x = self.token_embedding(ids)
        if self.c["embedding_scale"]:
            x = x * math.sqrt(self.c["d_model"])
        return x + self.position_embedding(torch.arange(ids.shape[1]))

    def forward(self, ids, tgt=None):
        if tgt is not None:
            L = tgt.shape[1]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(L)
            h = self.transformer(self.embed(ids), self.embed(tgt),
                                 tgt_mask=mask)
        else:
            h = self.embed(ids)
            L = ids.shape[1]
            mask = None
            if self.c["architecture"] == "decoder_only":
                mask = torch.triu(torch.full((L, L), float("-inf")), 1)
            for layer in self.layers:
                h = layer(h, src_mask=mask)
            h = self.norm(h)
        w = (self.token_embedding.weight if self.c["tied_embeddings"]
             else self.lm_head.weight)
        return h @ w.T
