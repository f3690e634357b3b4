// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// The part of Uniswap Permit2's SignatureTransfer this contract calls.
interface ISignatureTransfer {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

interface IERC20Permit {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s) external;
}

/// @title UptoPermit2Proxy: the local dev chain's stand-in for x402's upto Permit2 proxy (dev chain and tests only).
/// @notice The interface `@x402/evm`'s `upto` scheme signs for and settles through (its x402UptoPermit2ProxyABI:
///         settle, settleWithPermit, PERMIT2, WITNESS_TYPE_STRING), installed at the address that package expects
///         (test/helpers/permit2.ts). The payer signs a Permit2 PermitWitnessTransferFrom naming this contract as
///         spender, with a witness that fixes the recipient, the one facilitator allowed to settle, and a validAfter;
///         that facilitator then moves any amount up to the signed maximum, once (Permit2's nonce).
///         Written here, not vendored: x402's published init code lands at another address than the package's.
contract UptoPermit2Proxy {
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    /// Permit2 appends this to "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,"
    /// (EIP-712: referenced types in alphabetical order), the type the payer signed.
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    event Settled();
    event SettledWithPermit();

    error InvalidAmount();
    error InvalidOwner();
    error InvalidDestination();
    error UnauthorizedFacilitator();
    error PaymentTooEarly();

    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        _settle(permit, amount, owner, witness, signature);
        emit Settled();
    }

    /// The same, after an EIP-2612 permit that lets Permit2 spend the payer's token (a payer with no Permit2 allowance
    /// pays without gas). A permit that fails (already used, front-run) is ignored: Permit2's own transfer then decides.
    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        try IERC20Permit(permit.permitted.token).permit(
            owner, address(PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s
        ) {} catch {}
        _settle(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (amount == 0 || amount > permit.permitted.amount) revert InvalidAmount();
        if (owner == address(0)) revert InvalidOwner();
        if (witness.to == address(0)) revert InvalidDestination();
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        if (block.timestamp < witness.validAfter) revert PaymentTooEarly();
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
