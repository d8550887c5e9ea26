# The layers of src/, bottom to top, each a folder and a static library (streambp_<layer>) that
# links the layers it may use. A layer's code may include headers of its own folder and of the
# layers below it in this graph (transitively), nothing else: cmake/check_layers.cmake fails the
# build on an include that runs back up, naming the file, the line and the layers involved.
#
#   core                      errors, tensors, the ledger, files, the collectives' interface
#   backend   <- core         the backend contract and its CPU / meta / CUDA implementations
#   data      <- core         tokenizers, datasets, chat templates
#   objective <- core         losses on one chunk of logits (no model, no engine)
#   model     <- backend      configuration, weights, the decoder layer
#   convert   <- model data   GGUF files to and from Hugging Face directories (streambp convert)
#   engine    <- model objective   the modes (base, checkpoint, stream)
#   optim     <- model        optimizers
#   dist      <- engine optim data parallel ranks (MPI; NCCL lives with the CUDA library)
#   step      <- dist         one optimizer step over micro-batches
#   plan      <- step         shape-only planning of a step
#   reward    <- core         reward programs (command, regex, python-free)
#   check     <- step         gradcheck and random batches: shared by the commands and the tests
#   train     <- plan reward data   the trainer
#   cli       <- train check convert  the commands
#
# Above the backend layer only the contract's own headers (src/backend/*.h) may be included,
# never a concrete backend's (backend/cpu/, backend/cuda/, backend/meta/).
set(STREAMBP_LAYERS core backend data objective model convert engine optim dist step plan reward check
  train cli)
set(STREAMBP_LAYER_DEPS_core "")
set(STREAMBP_LAYER_DEPS_backend core)
set(STREAMBP_LAYER_DEPS_data core)
set(STREAMBP_LAYER_DEPS_objective core)
set(STREAMBP_LAYER_DEPS_model backend)
set(STREAMBP_LAYER_DEPS_convert model data)
set(STREAMBP_LAYER_DEPS_engine model objective)
set(STREAMBP_LAYER_DEPS_optim model)
set(STREAMBP_LAYER_DEPS_dist engine optim)
set(STREAMBP_LAYER_DEPS_step dist)
set(STREAMBP_LAYER_DEPS_plan step)
set(STREAMBP_LAYER_DEPS_reward core)
set(STREAMBP_LAYER_DEPS_check step)
set(STREAMBP_LAYER_DEPS_train plan reward data)
set(STREAMBP_LAYER_DEPS_cli train check convert)
# Files that belong to a lower library although they live in a higher folder, with why:
# the NCCL communicator is a dist Communicator built from CUDA streams; it is compiled into the
# CUDA library (it needs the CUDA backend's stream), so it may see backend/cuda/.
set(STREAMBP_LAYER_EXCEPTIONS "dist/nccl_communicator.cpp")
