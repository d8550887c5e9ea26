# The layers of src/, bottom to top, each a folder and a static library (streambp_<layer>) that
# links the layers it may use. A layer's code may include headers of its own folder and of the
# layers below it in this graph (transitively), nothing else: cmake/check_layers.cmake fails the
# build on an include that runs back up, naming the file, the line and the layers involved.
# docs/HACKING.md shows this graph, generated from this file (cmake/layer_graph.cmake; the test
# Layers.HackingShowsLayersCmake fails when they differ).
#
# Above the backend layer only the contract's own headers (src/backend/*.h) may be included,
# never a concrete backend's (backend/cpu/, backend/cuda/, backend/meta/); and a header of src/
# is included with quotes, from src/ ("core/error.h", not <core/error.h> nor "../core/error.h"),
# the spelling the check reads.
set(STREAMBP_LAYERS core backend data objective objective_kernels model convert engine optim dist
  step plan reward check train cli)
# What each layer holds, for the graph of docs/HACKING.md.
set(STREAMBP_LAYER_HOLDS_core "errors, tensors, the ledger, files, the collectives' interface")
set(STREAMBP_LAYER_HOLDS_backend "the backend contract and its CPU / meta / CUDA implementations")
set(STREAMBP_LAYER_HOLDS_data "tokenizers, datasets, chat templates")
set(STREAMBP_LAYER_HOLDS_objective "losses on one chunk of logits (no model, no engine)")
set(STREAMBP_LAYER_HOLDS_objective_kernels "the objectives' own kernels, one set per backend")
set(STREAMBP_LAYER_HOLDS_model "configuration, weights, the decoder layer")
set(STREAMBP_LAYER_HOLDS_convert "GGUF files to and from Hugging Face directories (streambp convert)")
set(STREAMBP_LAYER_HOLDS_engine "the modes (base, checkpoint, stream)")
set(STREAMBP_LAYER_HOLDS_optim "optimizers")
set(STREAMBP_LAYER_HOLDS_dist "data parallel ranks (MPI; NCCL lives with the CUDA library)")
set(STREAMBP_LAYER_HOLDS_step "one optimizer step over micro-batches")
set(STREAMBP_LAYER_HOLDS_plan "shape-only planning of a step")
set(STREAMBP_LAYER_HOLDS_reward "reward programs (command, regex, python-free)")
set(STREAMBP_LAYER_HOLDS_check "gradcheck and random batches: shared by the commands and the tests")
set(STREAMBP_LAYER_HOLDS_train "the trainer")
set(STREAMBP_LAYER_HOLDS_cli "the commands")
# The layers each layer links (and may include), besides those they link in turn.
set(STREAMBP_LAYER_DEPS_core "")
set(STREAMBP_LAYER_DEPS_backend core)
set(STREAMBP_LAYER_DEPS_data core)
set(STREAMBP_LAYER_DEPS_objective core)
set(STREAMBP_LAYER_DEPS_objective_kernels backend objective)
set(STREAMBP_LAYER_DEPS_model backend)
set(STREAMBP_LAYER_DEPS_convert model data)
set(STREAMBP_LAYER_DEPS_engine model objective_kernels)
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
# So are the objectives' CUDA kernels, which launch on that stream
# (objective_kernels/kernel_table.h).
set(STREAMBP_LAYER_EXCEPTIONS "dist/nccl_communicator.cpp" "objective_kernels/cuda/policy_terms.cu"
  "objective_kernels/cuda/sequence_terms.cu")
