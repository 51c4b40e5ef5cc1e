-- transformer.optim: the optimizers (optim.SGD, Adam, AdamW) and the
-- learning-rate schedules (lr_scheduler).

local U = require("transformer._util")
local M, check_bool, check_int = U.M, U.check_bool, U.check_int
local check_number, check_options, core = U.check_number, U.check_options, U.core
local fail = U.fail
local handle = require("transformer.module").handle

---------------------------------------------------------------------------
-- Optimizers (training.h), torch.optim's definitions and defaults:
--
--   local opt = T.optim.AdamW(model, { lr = 1e-3, weight_decay = 0.01 })
--   model:train()
--   for step = 1, n do
--     opt:zero_grad(); model:loss(ids, targets); model:backward(); opt:step()
--   end
--
-- SGD {lr, momentum, dampening, nesterov, weight_decay, maximize};
-- Adam / AdamW {lr, betas = {b1, b2}, eps, weight_decay, amsgrad,
-- maximize}.  The module must be in training mode when the optimizer is
-- made (train() allocates the gradients); the optimizer keeps it alive,
-- and closing the module (or its parent) closes the optimizer.
---------------------------------------------------------------------------

local Optimizer = {}
Optimizer.__index = Optimizer
local OPT_KIND = { SGD = "TFM_OPTIMIZER_SGD", Adam = "TFM_OPTIMIZER_ADAM",
                   AdamW = "TFM_OPTIMIZER_ADAMW" }
local OPT_OPTIONS = {
  SGD = { "lr", "momentum", "dampening", "nesterov", "weight_decay", "maximize" },
  Adam = { "lr", "betas", "eps", "weight_decay", "amsgrad", "maximize" },
}
OPT_OPTIONS.AdamW = OPT_OPTIONS.Adam

local function new_optimizer(kind, module, opts)
  local what = "optim." .. kind
  local h = handle(module)
  opts = check_options(what, opts, OPT_OPTIONS[kind])
  local o = core.tfm_optimizer_options()
  core.tfm_optimizer_options_init(o, core[OPT_KIND[kind]])
  for _, f in ipairs({ "lr", "momentum", "dampening", "weight_decay", "eps" }) do
    if opts[f] ~= nil then o[f] = check_number(what .. ": " .. f, opts[f]) end
  end
  for _, f in ipairs({ "nesterov", "amsgrad", "maximize" }) do
    if opts[f] ~= nil then o[f] = check_bool(what .. ": " .. f, opts[f]) and 1 or 0 end
  end
  if opts.betas ~= nil then
    local b = opts.betas
    if type(b) ~= "table" or #b ~= 2 then fail("%s: betas must be {beta1, beta2}", what) end
    o.beta1, o.beta2 = check_number("beta1", b[1]), check_number("beta2", b[2])
  end
  return setmetatable({ _h = core.tfm_optimizer_create(h, o), module = module,
                        _class_name = kind }, Optimizer)
end

-- The optimizer's handle, once its module (and the module's parents, for
-- a sub-module) is known open: the C optimizer refers to the module's
-- memory (training.h), and closing the module closes it (lifetimes.h), so
-- a use after that raises an error naming the module.
local function opt_handle(self)
  if getmetatable(self) ~= Optimizer then
    fail("expected an optimizer (call methods as opt:method(...)), got %s", type(self))
  end
  handle(self.module)
  if core.is_closed(self._h) then fail("this %s optimizer has been closed", self._class_name) end
  return self._h
end

--- One update of every parameter (tfm_optimizer_step).
function Optimizer:step() core.tfm_optimizer_step(opt_handle(self)) end
--- Zeroes the parameters' gradients (tfm_optimizer_zero_grad).
function Optimizer:zero_grad() core.tfm_optimizer_zero_grad(opt_handle(self)) end
--- The learning rate of the next step, and setting it (a scheduler's).
function Optimizer:get_lr() return core.tfm_optimizer_get_lr(opt_handle(self)) end
function Optimizer:set_lr(lr) core.tfm_optimizer_set_lr(opt_handle(self), check_number("lr", lr)) end
--- Frees the C optimizer now (the module stays).  Idempotent.
function Optimizer:close() core.close(self._h) end
--- true once the optimizer, or its module, was closed.
function Optimizer:is_closed() return core.is_closed(self._h) end

M.optim = {
  SGD = function(module, opts) return new_optimizer("SGD", module, opts) end,
  Adam = function(module, opts) return new_optimizer("Adam", module, opts) end,
  AdamW = function(module, opts) return new_optimizer("AdamW", module, opts) end,
}

---------------------------------------------------------------------------
-- Learning-rate schedules (training.h), torch.optim.lr_scheduler's
-- convention: a scheduler made from a base lr gives the lr of step 0;
-- each :step() (after an optimizer step) moves to the next:
--
--   local sched = T.lr_scheduler.warmup_cosine{lr = 3e-4, warmup_steps = 100,
--                                              total_steps = 1000}
--   for s = 0, 999 do use(sched:get_last_lr()); sched:step() end
--
-- lr = lr * factor(last_epoch); the factors are the C library's, so Lua,
-- Python and C agree at every step.
---------------------------------------------------------------------------

local Scheduler = {}
Scheduler.__index = Scheduler

local function new_scheduler(what, lr, factor, last_epoch)
  local self = setmetatable({ base_lr = check_number(what .. ": lr", lr),
                              lr_lambda = factor,
                              last_epoch = last_epoch == nil and 0
                                or check_int(what .. ": last_epoch", last_epoch, 0) }, Scheduler)
  self._last_lr = self.base_lr * factor(self.last_epoch)
  return self
end

--- Moves to the next step and returns its lr.
function Scheduler:step()
  self.last_epoch = self.last_epoch + 1
  self._last_lr = self.base_lr * self.lr_lambda(self.last_epoch)
  return self._last_lr
end

--- The lr of the current step (a number; torch returns a list of one).
function Scheduler:get_last_lr()
  return self._last_lr
end

M.lr_scheduler = {}

--- lambda_lr{lr = base, lr_lambda = function(step) return factor end
-- [, last_epoch = 0]}: torch's LambdaLR.
function M.lr_scheduler.lambda_lr(opts)
  local a = check_options("lambda_lr", opts, { "lr", "lr_lambda", "last_epoch" })
  if type(a.lr_lambda) ~= "function" then fail("lambda_lr: lr_lambda must be a function") end
  return new_scheduler("lambda_lr", a.lr, function(s) return check_number("lr_lambda result", a.lr_lambda(s)) end,
                       a.last_epoch)
end

--- inverse_sqrt_warmup{lr = 1, d_model = D, warmup_steps = 4000
-- [, last_epoch]}: "Attention Is All You Need" section 5.3,
-- d_model^-0.5 * min(n^-0.5, n * warmup^-1.5), n = max(step, 1).
function M.lr_scheduler.inverse_sqrt_warmup(opts)
  local a = check_options("inverse_sqrt_warmup", opts, { "lr", "d_model", "warmup_steps", "last_epoch" })
  local d = check_int("inverse_sqrt_warmup: d_model", a.d_model)
  local w = a.warmup_steps == nil and 4000 or check_int("inverse_sqrt_warmup: warmup_steps", a.warmup_steps)
  core.tfm_lr_inverse_sqrt_warmup(0, d, w)   -- argument errors now
  return new_scheduler("inverse_sqrt_warmup", a.lr == nil and 1.0 or a.lr,
                       function(s) return core.tfm_lr_inverse_sqrt_warmup(s, d, w) end, a.last_epoch)
end

--- warmup_cosine{lr = base, warmup_steps = W, total_steps = N
-- [, min_factor = 0, last_epoch]}: linear warm-up then cosine decay to
-- min_factor (Hugging Face's get_cosine_schedule_with_warmup, floored).
function M.lr_scheduler.warmup_cosine(opts)
  local a = check_options("warmup_cosine", opts, { "lr", "warmup_steps", "total_steps", "min_factor", "last_epoch" })
  local w = check_int("warmup_cosine: warmup_steps", a.warmup_steps)
  local n = check_int("warmup_cosine: total_steps", a.total_steps)
  local m = a.min_factor == nil and 0.0 or check_number("warmup_cosine: min_factor", a.min_factor)
  core.tfm_lr_warmup_cosine(0, w, n, m)
  return new_scheduler("warmup_cosine", a.lr,
                       function(s) return core.tfm_lr_warmup_cosine(s, w, n, m) end, a.last_epoch)
end
